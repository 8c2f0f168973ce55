package devstore

import (
	"context"
	"sync"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

var (
	dockerOnce sync.Once
	dockerOK   bool
)

// dockerAnswers reports whether a Docker engine answers a ping within two
// seconds. The answer is computed once per process: an engine does not come
// and go during a test run, and each probe costs a timeout where there is
// none. It never panics, although some testcontainers helpers do when no
// engine is found.
func dockerAnswers(ctx context.Context) bool {
	dockerOnce.Do(func() {
		dockerOK = probeDocker(ctx)
	})
	return dockerOK
}

func probeDocker(ctx context.Context) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()

	// WithoutCancel: a caller's cancellation must not decide the answer that
	// every later caller in this process gets.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()

	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return false
	}
	defer cli.Close()

	_, err = cli.Ping(ctx, client.PingOptions{})
	return err == nil
}
