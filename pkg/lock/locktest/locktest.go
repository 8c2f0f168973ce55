// Package locktest is the conformance suite every lock.Backend passes. A
// backend's own test calls Run with a factory that connects to a real
// server; the suite then checks, through lock.Locker and directly on the
// backend, the guarantees package lock documents, bad arguments included.
// It also holds the lock benchmarks' shared loop (BenchUncontended,
// BenchContended over a Mutex), so that every backend and its peers are
// measured the same way.
package locktest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/lock"
)

// Harness describes the backend under test.
type Harness struct {
	// Backend returns a backend connected to the server under test. The
	// suite calls it more than once to model separate processes.
	Backend func(t *testing.T) lock.Backend

	// TTL is the short lease used by the expiry and watchdog tests.
	// Default: 300ms, or the backend's floor if that is higher.
	TTL time.Duration
}

// Run runs the whole suite as subtests of t.
func Run(t *testing.T, h Harness) {
	if h.TTL == 0 {
		h.TTL = 300 * time.Millisecond
		if f, ok := h.Backend(t).(lock.TTLFloor); ok && f.MinTTL() > h.TTL {
			h.TTL = f.MinTTL()
		}
	}
	t.Run("MutualExclusion", func(t *testing.T) { testMutualExclusion(t, h) })
	t.Run("TokensIncrease", func(t *testing.T) { testTokensIncrease(t, h) })
	t.Run("ExpiryAndTakeover", func(t *testing.T) { testExpiryAndTakeover(t, h) })
	t.Run("WatchdogKeepsAliveAndStops", func(t *testing.T) { testWatchdog(t, h) })
	t.Run("NonOwnerChangesNothing", func(t *testing.T) { testNonOwner(t, h) })
	t.Run("CancelledAcquireLeavesNothing", func(t *testing.T) { testCancelledAcquire(t, h) })
	t.Run("LostReplyLeavesNothing", func(t *testing.T) { testLostReplyLeavesNothing(t, h) })
	t.Run("TryAcquireDoesNotWait", func(t *testing.T) { testTryAcquire(t, h) })
	t.Run("SameOwnerReacquires", func(t *testing.T) { testSameOwner(t, h) })
	t.Run("BadArgumentsRejectedBeforeIO", func(t *testing.T) { testBadArguments(t, h) })
	t.Run("ReleaseOwner", func(t *testing.T) { testReleaseOwner(t, h) })
}

func key(t *testing.T) string { return "locktest/" + t.Name() + "/" + randomHex(4) }

func locker(t *testing.T, b lock.Backend, opts ...lock.Option) *lock.Locker {
	t.Helper()
	l, err := lock.New(b, opts...)
	if err != nil {
		t.Fatalf("lock.New: %v", err)
	}
	return l
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// counting wraps a backend and counts the calls that reach it, so the suite
// can tell whether a call did I/O and whether a watchdog is still renewing.
type counting struct {
	lock.Backend
	acquires, refreshes, releases atomic.Int64
}

func (c *counting) TryAcquire(ctx context.Context, key, owner string, ttl time.Duration) (uint64, error) {
	c.acquires.Add(1)
	return c.Backend.TryAcquire(ctx, key, owner, ttl)
}

func (c *counting) Refresh(ctx context.Context, key, owner string, token uint64, ttl time.Duration) error {
	c.refreshes.Add(1)
	return c.Backend.Refresh(ctx, key, owner, token, ttl)
}

func (c *counting) Release(ctx context.Context, key, owner string, token uint64) error {
	c.releases.Add(1)
	return c.Backend.Release(ctx, key, owner, token)
}

func (c *counting) Watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	if n, ok := c.Backend.(lock.Notifier); ok {
		return n.Watch(ctx, key)
	}
	return nil, func() {}
}

func (c *counting) MinTTL() time.Duration {
	if f, ok := c.Backend.(lock.TTLFloor); ok {
		return f.MinTTL()
	}
	return 0
}

func (c *counting) calls() int64 {
	return c.acquires.Load() + c.refreshes.Load() + c.releases.Load()
}

// wrapper is what the suite's wrappers of a backend (counting, lossy)
// implement.
type wrapper interface {
	lock.Backend
	lock.Notifier
	lock.TTLFloor
}

// keepOwnerReleaser returns w, with inner's ReleaseOwner when inner
// implements lock.OwnerReleaser: a wrapper that hid it would make a Locker
// over w clean up by taking the key, unlike a Locker over inner.
func keepOwnerReleaser(w wrapper, inner lock.Backend) lock.Backend {
	if r, ok := inner.(lock.OwnerReleaser); ok {
		return struct {
			wrapper
			lock.OwnerReleaser
		}{w, r}
	}
	return w
}
