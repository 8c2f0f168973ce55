package env

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// ErrStoreNotAnswering says that the run's MongoDB stopped answering: a
// read of one document went unanswered for the whole of a watch's limit.
// The error that wraps it says for how long, what the gate in front of
// the embedded FerretDB holds, and where the store's log is, with its
// last lines.
var ErrStoreNotAnswering = errors.New("the store stopped answering")

// How WatchStore watches: a read every storeWatchEvery, each given
// storeReadTimeout; the run is stopped once none was answered for
// StoreWatchLimit. The limit is far above a FerretDB restart (the
// mongo-restart drill's, about 2 s) and far below the harness's own
// timeouts, which would otherwise end the run much later and say less.
const (
	storeWatchEvery  = time.Second
	storeReadTimeout = 3 * time.Second
	StoreWatchLimit  = 30 * time.Second
)

// WatchStore reads one document from MongoDB, directly and not through
// a replica, every storeWatchEvery until ctx is done. At the first read
// that is not answered it says so through logf; once none has been
// answered for limit, it calls stop with an error wrapping
// ErrStoreNotAnswering and returns.
func (e *Env) WatchStore(ctx context.Context, limit time.Duration, logf func(string, ...any), stop func(error)) {
	c, err := mongo.Connect(options.Client().ApplyURI(e.Mongo.URI).SetAppName("loadtest-watch").
		SetMaxPoolSize(2).SetServerSelectionTimeout(storeReadTimeout))
	if err != nil {
		logf("  the store's watch could not start: %v", err)
		return
	}
	defer func() { _ = c.Disconnect(context.Background()) }()
	coll := c.Database("stocklock_watch").Collection("watch")

	t := time.NewTicker(storeWatchEvery)
	defer t.Stop()
	var (
		since           time.Time // of the first unanswered read in a row
		reads, answered int
		slowest         time.Duration
	)
	defer func() {
		if reads > 0 {
			logf("  the store answered %d of %d reads made directly, not through a replica, every %s during the run; the slowest in %s",
				answered, reads, storeWatchEvery, slowest.Round(time.Millisecond))
		}
	}()
	for {
		rctx, cancel := context.WithTimeout(ctx, storeReadTimeout)
		t0 := time.Now()
		err := coll.FindOne(rctx, bson.D{{Key: "_id", Value: "watch"}}).Err()
		took := time.Since(t0)
		cancel()
		if ctx.Err() != nil {
			return
		}
		reads++
		slowest = max(slowest, took)
		switch {
		case err == nil || errors.Is(err, mongo.ErrNoDocuments):
			answered++
			if !since.IsZero() {
				logf("  the store answers again, after %s", time.Since(since).Round(time.Second))
			}
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
			logf("  the store did not answer a read in %s (%v); the run stops if it does not answer for %s", storeReadTimeout, err, limit)
		case time.Since(since) >= limit:
			stop(e.storeError(time.Since(since), err))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// storeError is ErrStoreNotAnswering with what there is to say about the
// store: the gate's state and the store's log.
func (e *Env) storeError(silent time.Duration, last error) error {
	var b strings.Builder
	fmt.Fprintf(&b, "no read answered for %s (the last: %v)", silent.Round(time.Second), last)
	if st, ok := e.Mongo.GateStats(); ok {
		fmt.Fprintf(&b, "; the gate: %d client connections, %d requests in FerretDB, %d documents held or waited for, %d writes cut after the hung-write limit",
			st.Conns, st.InFlight, st.Documents, st.Abandoned)
	}
	if e.opt.OutDir != "" {
		path := filepath.Join(e.opt.OutDir, "devstore.log")
		fmt.Fprintf(&b, "; the store's log: %s", path)
		if tail := lastLines(path, 10); tail != "" {
			fmt.Fprintf(&b, ", ending:\n%s", tail)
		}
	}
	return fmt.Errorf("%w: %s", ErrStoreNotAnswering, b.String())
}

// lastLines returns the last n lines of the file at path, "" if it cannot
// be read.
func lastLines(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
