// Package storeproc runs the embedded stores that have no server binary on
// this machine, FerretDB (on SQLite) and etcd, each in a process of its own.
//
// The process is devstored (./devstored), built from this module with go
// build on first use and shared by every process on the machine that needs
// it; set DEVSTORED to the path of a prebuilt one to skip the build. Keeping
// the stores out of the caller's process means the race-instrumented test
// binaries neither compile nor run FerretDB, SQLite and etcd's server, and a
// store can be killed like a real one.
//
// A devstored prints "ready" and its addresses on stdout once it serves, and
// stops when its stdin closes, so it never outlives the process that started
// it.
package storeproc

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Package is the import path of devstored, for go build.
const Package = "github.com/stocklock/stocklock/internal/storeproc/devstored"

// ErrExited is returned by Ready when devstored exits before it is ready.
var ErrExited = errors.New("storeproc: devstored exited before it was ready")

// readyTimeout bounds the wait for a devstored to serve: a cluster member
// is ready only once a quorum has started.
const readyTimeout = 60 * time.Second

// Proc is one running devstored.
type Proc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	ready  chan []string // the addresses on the ready line, once
	exited chan struct{} // closed when the process has exited
}

// Start starts devstored with args (its subcommand and flags, see
// devstored's doc) and returns without waiting for it to serve: call Ready.
// It builds devstored first when needed. Lines devstored writes on stderr
// go to logger at Warn. A nil logger means slog.Default().
func Start(ctx context.Context, logger *slog.Logger, args ...string) (*Proc, error) {
	if logger == nil {
		logger = slog.Default()
	}
	if len(args) == 0 {
		return nil, errors.New("storeproc: no devstored subcommand")
	}
	bin, err := Binary(ctx, logger)
	if err != nil {
		return nil, err
	}

	p := &Proc{
		name:   args[0],
		cmd:    exec.Command(bin, args...),
		ready:  make(chan []string, 1),
		exited: make(chan struct{}),
	}
	// Its own process group: a Ctrl-C at the terminal reaches the caller,
	// which stops its stores in order, not the stores first.
	ownGroup(p.cmd)
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("storeproc: devstored %s: %w", p.name, err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("storeproc: devstored %s: %w", p.name, err)
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("storeproc: devstored %s: %w", p.name, err)
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("storeproc: start devstored %s: %w", p.name, err)
	}

	var pipes sync.WaitGroup
	pipes.Go(func() { p.readStdout(stdout) })
	pipes.Go(func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logger.Warn(sc.Text(), slog.String("devstored", p.name))
		}
		_, _ = io.Copy(io.Discard, stderr) // past a line too long to scan
	})
	go func() {
		// Wait closes the pipes only after the process has exited and
		// they are drained; reading them to the end first keeps the
		// last lines.
		pipes.Wait()
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// readStdout delivers the ready line and drains the rest.
func (p *Proc) readStdout(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if addrs, ok := strings.CutPrefix(sc.Text(), "ready"); ok {
			select {
			case p.ready <- strings.Fields(addrs):
			default:
			}
		}
	}
	_, _ = io.Copy(io.Discard, r) // past a line too long to scan
}

// Ready waits until devstored serves and returns the addresses it reported:
// FerretDB's host:port; an etcd member's client and peer host:port. It
// fails when the process exits first (ErrExited), ctx ends, or a minute
// passes.
func (p *Proc) Ready(ctx context.Context) ([]string, error) {
	t := time.NewTimer(readyTimeout)
	defer t.Stop()
	select {
	case addrs := <-p.ready:
		return addrs, nil
	case <-p.exited:
		return nil, fmt.Errorf("devstored %s: %w (%v)", p.name, ErrExited, p.cmd.ProcessState)
	case <-ctx.Done():
		return nil, fmt.Errorf("devstored %s: %w", p.name, ctx.Err())
	case <-t.C:
		return nil, fmt.Errorf("devstored %s: not ready after %s", p.name, readyTimeout)
	}
}

// Exited is closed once the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Shutdown asks devstored to shut down cleanly, closing its store's files,
// and returns at once: the store stops accepting connections first.
func (p *Proc) Shutdown() {
	_ = p.stdin.Close()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
}

// Stop shuts devstored down cleanly and waits for it, killing it if it has
// not exited within 10 seconds.
func (p *Proc) Stop() {
	p.Shutdown()
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.Kill()
	}
}

// Kill ends devstored with SIGKILL, as a crash would, and waits for it.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// build caches this process's devstored path; buildMu makes one goroutine
// build while the others wait, and lets a failed build be tried again.
var (
	buildMu sync.Mutex
	built   string
)

// Binary returns the path of devstored: $DEVSTORED if set, otherwise one
// built with go build from the module in the working directory, into the
// user's cache directory (one per module directory and GOFLAGS). The go
// command skips the link when that file is up to date, and a file lock
// keeps two processes from building at once.
func Binary(ctx context.Context, logger *slog.Logger) (string, error) {
	if p := os.Getenv("DEVSTORED"); p != "" {
		return p, nil
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if built != "" {
		return built, nil
	}

	// One binary per checkout and GOFLAGS: two checkouts, or two
	// versions of devstored, never overwrite each other's.
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("storeproc: go env GOMOD (is Go on PATH?): %w", err)
	}
	key := sha256.Sum256([]byte(strings.TrimSpace(string(gomod)) + "\x00" + os.Getenv("GOFLAGS")))
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	dir = filepath.Join(dir, "stocklock", "devstored-"+hex.EncodeToString(key[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("storeproc: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(dir, "devstored.lock"))
	if err != nil {
		return "", fmt.Errorf("storeproc: lock the devstored build: %w", err)
	}
	defer unlock()

	bin := filepath.Join(dir, "devstored")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	t0 := time.Now()
	stop := progress(logger, t0)
	// The Dockerfile's build mode, which the stock binary of the drill
	// tests uses too: a cold build cache compiles the shared dependencies
	// once for all of them.
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, Package)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.WaitDelay = time.Second // compilers left behind must not hold the pipe
	out, err := cmd.CombinedOutput()
	stop()
	if err != nil {
		return "", fmt.Errorf("storeproc: go build %s (run inside the stocklock module, or set DEVSTORED to a built devstored): %w\n%s",
			Package, err, strings.TrimSpace(string(out)))
	}
	if d := time.Since(t0); d > 5*time.Second {
		logger.Info("built devstored", slog.String("path", bin), slog.Duration("took", d.Round(100*time.Millisecond)))
	}
	built = bin
	return bin, nil
}

// progress logs every 15 seconds that the build is still going, until the
// returned function is called: a cold build takes minutes.
func progress(logger *slog.Logger, t0 time.Time) (stop func()) {
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(15 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				logger.Info("still building devstored (a cold build cache takes a few minutes)",
					slog.Duration("elapsed", time.Since(t0).Round(time.Second)))
			}
		}
	}()
	return func() { close(done) }
}
