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
)

// TestFencedStaleHolder replays the paused-holder scenario with real
// leases: holder A reads with token T and stalls past its TTL; B is granted
// T+1 and reads; A wakes up and writes. A's write must be rejected.
func TestFencedStaleHolder(t *testing.T) {
	s := testStore(t)
	ctx := t.Context()
	const sku, fence = "fenced", strategy.MongoLease
	mustPut(t, s, sku, 10)
	// No renewal, so that A's lease runs out as a paused holder's would.
	locker := localLocker(t, lock.WithTTL(lock.MinTTL), lock.WithRenewal(0))

	a, err := locker.Acquire(ctx, strategy.LockKey(sku))
	if err != nil {
		t.Fatal(err)
	}
	tokA := int64(a.Token())
	if it, err := s.FencedRead(ctx, sku, fence, tokA); err != nil || it.Stock != 10 {
		t.Fatalf("A's fenced read: %+v, %v", it, err)
	}
	<-a.Done() // A "pauses" until its lease has expired.

	b, err := locker.Acquire(ctx, strategy.LockKey(sku))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(context.Background())
	tokB := int64(b.Token())
	if tokB <= tokA {
		t.Fatalf("B's token %d is not above A's %d", tokB, tokA)
	}
	if _, err := s.FencedRead(ctx, sku, fence, tokB); err != nil {
		t.Fatalf("B's fenced read: %v", err)
	}

	// A wakes up believing it holds the lock, and writes 10-1.
	order := func(tok int64) inventory.Order { return s.newOrder(inventory.Request{SKU: sku, Qty: 1}, fence, tok) }
	if err := s.FencedWrite(ctx, fence, tokA, 1, 9, order(tokA)); !errors.Is(err, inventory.ErrFenced) {
		t.Fatalf("stale write: %v, want inventory.ErrFenced", err)
	}
	if it := mustGet(t, s, sku); it.Stock != 10 || it.Version != 1 {
		t.Fatalf("after the stale write: %+v, want stock 10 at version 1", it)
	}
	// A stale read is refused too, and does not lower the fence.
	if _, err := s.FencedRead(ctx, sku, fence, tokA); !errors.Is(err, inventory.ErrFenced) {
		t.Fatalf("stale read: %v, want inventory.ErrFenced", err)
	}
	// A reset keeps the fence: the stale holder stays out.
	mustPut(t, s, sku, 10)
	if err := s.FencedWrite(ctx, fence, tokA, 2, 9, order(tokA)); !errors.Is(err, inventory.ErrFenced) {
		t.Fatalf("stale write after Put: %v, want inventory.ErrFenced", err)
	}
	// The current holder's write, computed from what it read before the
	// reset, is refused too: the version moved.
	if err := s.FencedWrite(ctx, fence, tokB, 1, 9, order(tokB)); !errors.Is(err, inventory.ErrStale) {
		t.Fatalf("B's write read before the reset: %v, want inventory.ErrStale", err)
	}
	// The current holder writes at the version it now reads.
	if err := s.FencedWrite(ctx, fence, tokB, 2, 9, order(tokB)); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	if it := mustGet(t, s, sku); it.Stock != 9 || it.Fences[fence] != tokB {
		t.Fatalf("after B's write: %+v", it)
	}
	// Fences of different locks are independent.
	if _, err := s.FencedRead(ctx, sku, strategy.RedisLock, 1); err != nil {
		t.Fatalf("first read under another lock: %v", err)
	}
	if err := s.FencedWrite(ctx, fence, tokB, 1, 1, s.newOrder(inventory.Request{SKU: "missing", Qty: 1}, fence, tokB)); !errors.Is(err, inventory.ErrNotFound) {
		t.Fatalf("fenced write of a missing item: %v, want inventory.ErrNotFound", err)
	}
}

// splitBrain is a lock service that has lost its state: it grants every
// request, with increasing tokens. Two holders at once is what a Redis
// failover to a replica that missed the grant looks like to its clients.
type splitBrain struct {
	mu    sync.Mutex
	token uint64
}

func (b *splitBrain) TryAcquire(context.Context, string, string, time.Duration) (uint64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.token++
	return b.token, nil
}
func (b *splitBrain) Refresh(context.Context, string, string, uint64, time.Duration) error {
	return nil
}
func (b *splitBrain) Release(context.Context, string, string, uint64) error { return nil }

// TestLockedFencingSwitch runs two replicas' lock strategies through a
// lock that granted both: the older holder is inside its read-modify-write
// window when the newer one sells. With fencing, the older write is
// rejected; without, it clobbers the newer sale.
func TestLockedFencingSwitch(t *testing.T) {
	for _, fencing := range []bool{true, false} {
		name := map[bool]string{true: "fencing", false: "no-fencing"}[fencing]
		t.Run(name, func(t *testing.T) {
			s := testStore(t)
			ctx := t.Context()
			const sku = "split"
			mustPut(t, s, sku, 10)
			locker, err := lock.New(&splitBrain{}, lock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			cfg := LockedConfig{Name: strategy.RedisLock, Locker: locker, Fencing: fencing}
			older, err := NewLocked(s, cfg)
			if err != nil {
				t.Fatal(err)
			}
			newer, err := NewLocked(s, cfg)
			if err != nil {
				t.Fatal(err)
			}
			var newerErr error
			older.afterRead = func(context.Context) {
				_, newerErr = newer.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1})
			}

			_, olderErr := older.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1})
			if newerErr != nil {
				t.Fatalf("newer holder: %v", newerErr)
			}
			it := mustGet(t, s, sku)
			orders := mustCount(t, s, sku)
			if fencing {
				if !errors.Is(olderErr, inventory.ErrFenced) {
					t.Fatalf("older holder: %v, want inventory.ErrFenced", olderErr)
				}
				if it.Stock != 9 || orders != 1 {
					t.Fatalf("stock %d with %d orders, want 9 with 1", it.Stock, orders)
				}
				return
			}
			// Without the fence both writes land: two sales, one unit gone.
			if olderErr != nil {
				t.Fatalf("older holder without fencing: %v", olderErr)
			}
			if it.Stock != 9 || orders != 2 {
				t.Fatalf("stock %d with %d orders, want the clobbered 9 with 2", it.Stock, orders)
			}
			t.Logf("without fencing: 2 sales recorded, stock went from 10 to %d (a lost update)", it.Stock)
		})
	}
}
