package lock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/locallock"
)

// recorder is an Observer that keeps every call.
type recorder struct {
	mu       sync.Mutex
	acquired []string
	refused  []error
	refresh  []error
	ended    []error
	held     []time.Duration
}

func (r *recorder) Acquired(key string, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acquired = append(r.acquired, key)
}

func (r *recorder) NotAcquired(_ string, _ time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refused = append(r.refused, err)
}

func (r *recorder) RefreshFailed(_ string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refresh = append(r.refresh, err)
}

func (r *recorder) Ended(_ string, held time.Duration, cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = append(r.ended, cause)
	r.held = append(r.held, held)
}

func (r *recorder) snapshot() recorder {
	r.mu.Lock()
	defer r.mu.Unlock()
	return recorder{acquired: r.acquired, refused: r.refused, refresh: r.refresh, ended: r.ended, held: r.held}
}

// failingRefresh is a backend whose renewals fail without saying the lease
// is gone: the lease runs out.
type failingRefresh struct{ lock.Backend }

var errRefresh = errors.New("refresh: connection refused")

func (failingRefresh) Refresh(context.Context, string, string, uint64, time.Duration) error {
	return errRefresh
}

func TestObserver(t *testing.T) {
	rec := &recorder{}
	locker, err := lock.New(locallock.New(), lock.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	lease, err := locker.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := locker.TryAcquire(ctx, "k"); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held key: %v", err)
	}
	time.Sleep(5 * time.Millisecond)
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_ = lease.Release(ctx) // a second release reports nothing more
	got := rec.snapshot()
	if len(got.acquired) != 1 || len(got.refused) != 1 || !errors.Is(got.refused[0], lock.ErrNotAcquired) {
		t.Fatalf("acquired %v, refused %v; want one of each", got.acquired, got.refused)
	}
	if len(got.ended) != 1 || !errors.Is(got.ended[0], lock.ErrReleased) || got.held[0] < 5*time.Millisecond {
		t.Fatalf("ended %v after %v; want one release after at least 5ms", got.ended, got.held)
	}

	// A lease whose renewals fail reports them, then its loss.
	rec = &recorder{}
	// A second, not MinTTL: the first renewal is due a third of the TTL
	// in; with 50ms, a loaded machine's scheduler could let the lease run
	// out before any renewal was tried, and no failure was reported.
	failing, err := lock.New(failingRefresh{locallock.New()}, lock.WithObserver(rec), lock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lease, err = failing.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	<-lease.Done()
	// Ended follows Done: the lease's context is cancelled first.
	for deadline := time.Now().Add(5 * time.Second); len(rec.snapshot().ended) == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	got = rec.snapshot()
	if len(got.refresh) == 0 || !errors.Is(got.refresh[0], errRefresh) {
		t.Fatalf("refresh failures %v; want the backend's error", got.refresh)
	}
	if len(got.ended) != 1 || !errors.Is(got.ended[0], lock.ErrLeaseLost) {
		t.Fatalf("ended %v; want one loss", got.ended)
	}
}
