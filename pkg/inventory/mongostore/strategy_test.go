package mongostore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"

	"github.com/stocklock/stocklock/pkg/strategy"

	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/locallock"
)

// strategies returns one of each kind over s, with in-process locks for the
// lock strategies (the distributed backends are exercised by the stock
// service's two-replica test).
func strategies(t *testing.T, s *Store) []inventory.Strategy {
	t.Helper()
	local, err := NewLocked(s, LockedConfig{Name: strategy.Local, Locker: localLocker(t)})
	if err != nil {
		t.Fatal(err)
	}
	fenced, err := NewLocked(s, LockedConfig{Name: "fenced-local", Locker: localLocker(t), Fencing: true})
	if err != nil {
		t.Fatal(err)
	}
	return []inventory.Strategy{NewUnsafe(s, 0), local, fenced, NewOptimistic(s, 0, 0), NewAtomic(s), NewBatched(s, 0)}
}

func localLocker(t *testing.T, opts ...lock.Option) *lock.Locker {
	t.Helper()
	l, err := locallock.NewLocker(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestStrategySemantics(t *testing.T) {
	s := testStore(t)
	for _, st := range strategies(t, s) {
		t.Run(st.Name(), func(t *testing.T) {
			ctx := t.Context()
			sku := "sem-" + st.Name()
			mustPut(t, s, sku, 3)

			sale, err := st.Decrement(ctx, inventory.Request{SKU: sku, Qty: 2})
			if err != nil {
				t.Fatalf("Decrement 2 of 3: %v", err)
			}
			if sale.Remaining != 1 || sale.Qty != 2 || sale.SKU != sku || sale.Strategy != st.Name() ||
				sale.Replica != "test" || sale.OrderID == "" || sale.LedgerErr != nil {
				t.Fatalf("sale = %+v", sale)
			}

			_, err = st.Decrement(ctx, inventory.Request{SKU: sku, Qty: 2})
			var so *inventory.SoldOutError
			if !errors.Is(err, inventory.ErrSoldOut) || !errors.As(err, &so) || so.Stock != 1 || so.Qty != 2 {
				t.Fatalf("Decrement 2 of 1: %v, want a inventory.SoldOutError with stock 1", err)
			}
			if _, err := st.Decrement(ctx, inventory.Request{SKU: "missing", Qty: 1}); !errors.Is(err, inventory.ErrNotFound) {
				t.Fatalf("Decrement of a missing item: %v, want inventory.ErrNotFound", err)
			}
			for _, qty := range []int64{0, -1} {
				// As Build returns it: the strategy trusts its check.
				if _, err := (checked{st}).Decrement(ctx, inventory.Request{SKU: sku, Qty: qty}); !errors.Is(err, inventory.ErrInvalid) {
					t.Fatalf("Decrement qty %d: %v, want inventory.ErrInvalid", qty, err)
				}
			}
			if it := mustGet(t, s, sku); it.Stock != 1 {
				t.Fatalf("stock = %d, want 1", it.Stock)
			}
			if n := mustCount(t, s, sku); n != 1 {
				t.Fatalf("orders = %d, want 1", n)
			}
		})
	}
}

// TestStrategiesConcurrentOneProcess checks the invariants that hold for
// every strategy but unsafe when all requests share one process: in-process
// locks are enough there.
func TestStrategiesConcurrentOneProcess(t *testing.T) {
	s := testStore(t)
	const stock, requests = 10, 16
	for _, st := range strategies(t, s)[1:] {
		t.Run(st.Name(), func(t *testing.T) {
			sku := "conc-" + st.Name()
			mustPut(t, s, sku, stock)
			var (
				wg   sync.WaitGroup
				mu   sync.Mutex
				sold int64
				ids  = map[string]bool{}
			)
			for range requests {
				wg.Go(func() {
					sale, err := st.Decrement(t.Context(), inventory.Request{SKU: sku, Qty: 1})
					if err != nil {
						if !errors.Is(err, inventory.ErrSoldOut) && !errors.Is(err, inventory.ErrConflict) && !errors.Is(err, inventory.ErrLockUnavailable) {
							t.Errorf("Decrement: %v", err)
						}
						return
					}
					mu.Lock()
					defer mu.Unlock()
					sold++
					if ids[sale.OrderID] {
						t.Errorf("order id %s twice", sale.OrderID)
					}
					ids[sale.OrderID] = true
				})
			}
			wg.Wait()
			it := mustGet(t, s, sku)
			if sold > stock || it.Stock != stock-sold {
				t.Errorf("sold %d of %d, stock now %d", sold, stock, it.Stock)
			}
			if n := mustCount(t, s, sku); n != sold {
				t.Errorf("ledger has %d orders, sold %d", n, sold)
			}
		})
	}
}

func TestLockUnavailable(t *testing.T) {
	s := testStore(t)
	mustPut(t, s, "busy", 5)
	locker := localLocker(t)
	st, err := NewLocked(s, LockedConfig{Name: strategy.Local, Locker: locker, Wait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	held, err := locker.Acquire(t.Context(), strategy.LockKey("busy"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())

	if _, err := st.Decrement(t.Context(), inventory.Request{SKU: "busy", Qty: 1}); !errors.Is(err, inventory.ErrLockUnavailable) {
		t.Fatalf("Decrement while another holds the lock: %v, want inventory.ErrLockUnavailable", err)
	}
	if it := mustGet(t, s, "busy"); it.Stock != 5 {
		t.Fatalf("stock = %d, want 5", it.Stock)
	}
}

func TestLeaseLostBeforeWrite(t *testing.T) {
	s := testStore(t)
	mustPut(t, s, "slow", 5)
	// No renewal: the lease expires after its TTL, as it would for a
	// holder whose renewals cannot get through.
	st, err := NewLocked(s, LockedConfig{
		Name: strategy.MongoLease, Fencing: true,
		Locker: localLocker(t, lock.WithTTL(lock.MinTTL), lock.WithRenewal(0)),
	})
	if err != nil {
		t.Fatal(err)
	}
	// Hold the critical section open until the lease is gone.
	st.afterRead = func(ctx context.Context) { <-ctx.Done() }

	_, err = st.Decrement(t.Context(), inventory.Request{SKU: "slow", Qty: 1})
	if !errors.Is(err, inventory.ErrLeaseLost) {
		t.Fatalf("Decrement whose lease expired before the write: %v, want inventory.ErrLeaseLost", err)
	}
	if it := mustGet(t, s, "slow"); it.Stock != 5 || it.Version != 1 {
		t.Fatalf("item = %+v, want stock 5 at version 1", it)
	}
	if n := mustCount(t, s, "slow"); n != 0 {
		t.Fatalf("orders = %d, want 0", n)
	}
	if st.Held() != 0 {
		t.Fatalf("Held = %d after the decrement", st.Held())
	}
}

// takenOver is a backend on which every lease is taken over as soon as it
// is granted: refreshes and releases are answered by another, empty table,
// so they find the lease not held, as a holder does when the server has
// given its key to someone else.
type takenOver struct {
	*locallock.Backend
	elsewhere *locallock.Backend
}

func (b takenOver) Refresh(ctx context.Context, key, owner string, token uint64, ttl time.Duration) error {
	return b.elsewhere.Refresh(ctx, key, owner, token, ttl)
}

// TestLeaseLostErrorChain: each layer of a lease lost through the service
// (backend, package lock, the strategy) adds its piece of context once, and
// errors.Is still finds every layer's sentinel.
func TestLeaseLostErrorChain(t *testing.T) {
	s := testStore(t)
	mustPut(t, s, "taken", 5)
	locker, err := lock.New(takenOver{locallock.New(), locallock.New()}, lock.WithTTL(time.Second), lock.WithRenewal(0.05))
	if err != nil {
		t.Fatal(err)
	}
	st, err := NewLocked(s, LockedConfig{Name: strategy.RedisLock, Fencing: true, Locker: locker})
	if err != nil {
		t.Fatal(err)
	}
	st.afterRead = func(ctx context.Context) { <-ctx.Done() } // until the first renewal finds the lease gone

	_, err = st.Decrement(t.Context(), inventory.Request{SKU: "taken", Qty: 1})
	const want = `inventory: lease lost before the write: redis-lock: lock: lease lost: locallock: refresh "item/taken" token 1: lock: lease not held`
	if err == nil || err.Error() != want {
		t.Errorf("error:\n got %v\nwant %s", err, want)
	}
	for _, target := range []error{inventory.ErrLeaseLost, lock.ErrLeaseLost, lock.ErrNotHeld} {
		if !errors.Is(err, target) {
			t.Errorf("errors.Is(err, %v) = false", target)
		}
	}
	if it := mustGet(t, s, "taken"); it.Stock != 5 {
		t.Errorf("stock = %d after a lost lease, want 5", it.Stock)
	}
}

func TestCloseReleasesHeldLeases(t *testing.T) {
	s := testStore(t)
	mustPut(t, s, "shut", 5)
	locker := localLocker(t)
	st, err := NewLocked(s, LockedConfig{Name: strategy.MongoLease, Fencing: true, Locker: locker})
	if err != nil {
		t.Fatal(err)
	}
	inside := make(chan struct{})
	st.afterRead = func(ctx context.Context) {
		close(inside)
		<-ctx.Done()
	}
	done := make(chan error, 1)
	go func() {
		_, err := st.Decrement(t.Context(), inventory.Request{SKU: "shut", Qty: 1})
		done <- err
	}()
	<-inside
	if st.Held() != 1 {
		t.Fatalf("Held = %d inside the critical section, want 1", st.Held())
	}
	st.Close()
	if err := <-done; !errors.Is(err, inventory.ErrLeaseLost) {
		t.Fatalf("Decrement interrupted by Close: %v, want inventory.ErrLeaseLost", err)
	}
	if st.Held() != 0 {
		t.Fatalf("Held = %d after Close", st.Held())
	}
	// The key is free again for other holders.
	lease, err := locker.TryAcquire(t.Context(), strategy.LockKey("shut"))
	if err != nil {
		t.Fatalf("TryAcquire after Close: %v", err)
	}
	_ = lease.Release(t.Context())
	if _, err := st.Decrement(t.Context(), inventory.Request{SKU: "shut", Qty: 1}); !errors.Is(err, inventory.ErrLockUnavailable) {
		t.Fatalf("Decrement after Close: %v, want inventory.ErrLockUnavailable", err)
	}
	if it := mustGet(t, s, "shut"); it.Stock != 5 {
		t.Fatalf("stock = %d, want 5", it.Stock)
	}
}
