package etcdlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/etcdlock"
)

func newFIFO(t testing.TB, c *clientv3.Client, opts ...etcdlock.Option) *etcdlock.FIFO {
	t.Helper()
	f, err := etcdlock.NewFIFO(c, opts...)
	if err != nil {
		t.Fatalf("NewFIFO: %v", err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// queued returns how many waiter keys (holder included) key has.
func queued(t *testing.T, c *clientv3.Client, f *etcdlock.FIFO, key string) int64 {
	t.Helper()
	r, err := c.Get(t.Context(), f.QueuePrefix(key), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return r.Count
}

func waitQueued(t *testing.T, c *clientv3.Client, f *etcdlock.FIFO, key string, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for queued(t, c, f, key) != n {
		if time.Now().After(deadline) {
			t.Fatalf("queue of %q never reached %d", key, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFIFOMutualExclusion is the conformance suite's racy counter, for the
// FIFO lock: 16 goroutines on two FIFOs (two "processes").
func TestFIFOMutualExclusion(t *testing.T) {
	const goroutines, rounds = 16, 25
	srv := devstore.EtcdT(t)
	prefix := testPrefix()
	fs := []*etcdlock.FIFO{
		newFIFO(t, devstore.EtcdClientT(t, srv), etcdlock.WithKeyPrefix(prefix)),
		newFIFO(t, devstore.EtcdClientT(t, srv), etcdlock.WithKeyPrefix(prefix)),
	}
	ctx := ctxFor(t, 2*time.Minute)
	var (
		counter   int
		holders   atomic.Int32
		lastToken atomic.Uint64
		wg        sync.WaitGroup
		errs      = make(chan error, goroutines)
	)
	for g := range goroutines {
		wg.Go(func() {
			for range rounds {
				h, err := fs[g%2].Acquire(ctx, "counter")
				if err != nil {
					errs <- err
					return
				}
				if holders.Add(1) != 1 {
					errs <- errors.New("two holders at once")
				}
				if tok := h.Token(); tok <= lastToken.Load() {
					errs <- errors.New("token did not increase")
				} else {
					lastToken.Store(tok)
				}
				v := counter
				time.Sleep(50 * time.Microsecond)
				counter = v + 1
				holders.Add(-1)
				if err := h.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if counter != goroutines*rounds {
		t.Errorf("counter = %d, want %d", counter, goroutines*rounds)
	}
}

// TestFIFOOrder queues waiters one after the other behind a holder and
// checks they are served in that order, each with the create revision of
// its waiter key as token.
func TestFIFOOrder(t *testing.T) {
	srv := devstore.EtcdT(t)
	c := devstore.EtcdClientT(t, srv)
	prefix := testPrefix()
	f := newFIFO(t, c, etcdlock.WithKeyPrefix(prefix))
	other := newFIFO(t, devstore.EtcdClientT(t, srv), etcdlock.WithKeyPrefix(prefix))
	ctx := ctxFor(t, time.Minute)
	key := "order/" + randHex(2) // a slash in the name must not matter

	first, err := f.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	var (
		mu    sync.Mutex
		order []int
		toks  []uint64
		wg    sync.WaitGroup
	)
	for i := range n {
		fi := f
		if i%2 == 1 {
			fi = other
		}
		wg.Go(func() {
			h, err := fi.Acquire(ctx, key)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			toks = append(toks, h.Token())
			mu.Unlock()
			_ = h.Release(ctx)
		})
		waitQueued(t, c, f, key, int64(i+2)) // i joins before i+1 starts
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("grant order %v, want 0..%d", order, n-1)
		}
	}
	for i := 1; i < len(toks); i++ {
		if toks[i] <= toks[i-1] {
			t.Errorf("tokens %v do not increase", toks)
		}
	}
	if q := queued(t, c, f, key); q != 0 {
		t.Errorf("%d waiter keys left after everyone released", q)
	}
}

// TestFIFOCancelledWaiter: a waiter that gives up removes its key, so the
// one behind it is not held up.
func TestFIFOCancelledWaiter(t *testing.T) {
	srv := devstore.EtcdT(t)
	c := devstore.EtcdClientT(t, srv)
	f := newFIFO(t, c, etcdlock.WithKeyPrefix(testPrefix()))
	ctx := ctxFor(t, time.Minute)
	key := "cancel-" + randHex(2)

	holder, err := f.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := f.Acquire(wctx, key)
		gaveUp <- err
	}()
	waitQueued(t, c, f, key, 2)
	behind := make(chan error, 1)
	go func() {
		h, err := f.Acquire(ctx, key)
		if err == nil {
			err = h.Release(ctx)
		}
		behind <- err
	}()
	waitQueued(t, c, f, key, 3)

	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Acquire = %v, want context.Canceled", err)
	}
	waitQueued(t, c, f, key, 2)
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-behind:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter behind a cancelled one was not served")
	}
	if err := holder.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("second Release = %v, want ErrNotHeld", err)
	}
}

// TestFIFOSessionLost: when the session's lease is revoked behind the
// FIFO's back, the holder's Done closes with ErrLeaseLost, the next waiter
// is served, and the FIFO starts a new session for the next Acquire.
func TestFIFOSessionLost(t *testing.T) {
	srv := devstore.EtcdT(t)
	c := devstore.EtcdClientT(t, srv)
	prefix := testPrefix()
	f := newFIFO(t, c, etcdlock.WithKeyPrefix(prefix), etcdlock.WithTTL(time.Second))
	other := newFIFO(t, devstore.EtcdClientT(t, srv), etcdlock.WithKeyPrefix(prefix))
	ctx := ctxFor(t, time.Minute)
	key := "lost-" + randHex(2)

	h, err := f.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *etcdlock.Held, 1)
	go func() {
		h2, err := other.Acquire(ctx, key)
		if err != nil {
			t.Error(err)
		}
		got <- h2
	}()
	waitQueued(t, c, f, key, 2)

	r, err := c.Get(ctx, f.QueuePrefix(key), clientv3.WithFirstCreate()...)
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("holder key: %v %v", r, err)
	}
	if uint64(r.Kvs[0].CreateRevision) != h.Token() {
		t.Errorf("token %d, holder key's create revision %d", h.Token(), r.Kvs[0].CreateRevision)
	}
	if _, err := c.Revoke(ctx, clientv3.LeaseID(r.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	h2 := <-got
	if h2 == nil {
		return
	}
	if h2.Token() <= h.Token() {
		t.Errorf("next holder's token %d not above %d", h2.Token(), h.Token())
	}
	select {
	case <-h.Done():
		if !errors.Is(h.Err(), lock.ErrLeaseLost) {
			t.Errorf("cause = %v, want ErrLeaseLost", h.Err())
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the holder whose lease was revoked never saw Done")
	}
	if err := h.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Release of the lost lock = %v, want ErrNotHeld", err)
	}
	_ = h2.Release(ctx)

	h3, err := f.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("Acquire after the session was lost: %v", err)
	}
	if err := h3.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Acquire(ctx, key); !errors.Is(err, etcdlock.ErrClosed) {
		t.Errorf("Acquire after Close = %v, want ErrClosed", err)
	}
}
