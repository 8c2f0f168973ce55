package mongostore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// holders returns the strategies that take part in holds, over s: atomic
// and a fenced lock strategy on locks (one shared by every replica).
func holders(t *testing.T, s *Store, locks lockServices) []inventory.Holder {
	t.Helper()
	l, err := NewLocked(s, LockedConfig{Name: strategy.MongoLease, Locker: locks[strategy.MongoLease], Fencing: true})
	if err != nil {
		t.Fatal(err)
	}
	return []inventory.Holder{NewAtomic(s), l}
}

// pastHold holds qty units of sku with an expiry the store's clock has
// already passed: a hold as it is once its time to live ran out, made
// without waiting for it.
func pastHold(t testing.TB, s *Store, sku string, qty int64) inventory.Hold {
	t.Helper()
	h, err := s.newHold(t.Context(), inventory.HoldRequest{SKU: sku, Qty: qty, TTL: time.Second}, strategy.Atomic, 0)
	if err != nil {
		t.Fatal(err)
	}
	h.Expires = h.Created.Add(-time.Second)
	if _, err := s.sell(t.Context(), sale{op: "hold", sku: sku, hold: &h, qty: qty}); err != nil {
		t.Fatalf("past hold of %q: %v", sku, err)
	}
	s.withHolds.add(sku) // as createHold does
	return h
}

// readUnits is one consistent reading of sku: the units available
// (stock, its buckets' included), held, and sold (orders in the ledger or
// pending, each once). It reads the item, the ledger, and the item again,
// and keeps the reading only when the two reads of the item agree: then
// no write of the item came between, and every sale is in one of the two
// places (an order is inserted in the ledger before it leaves pending).
func readUnits(ctx context.Context, s *Store, sku string) (stock, held, sold int64, err error) {
	for range 50 {
		a, err := s.Snapshot(ctx, sku)
		if err != nil {
			return 0, 0, 0, err
		}
		seen := map[string]bool{}
		q := inventory.OrdersQuery{SKU: sku, Limit: inventory.MaxOrdersLimit}
		sold = 0
		for {
			page, err := s.Orders(ctx, q)
			if err != nil {
				return 0, 0, 0, err
			}
			for _, o := range page.Orders {
				if seen[o.ID] {
					return 0, 0, 0, fmt.Errorf("order %s of %q is in the ledger twice", o.ID, sku)
				}
				seen[o.ID] = true
				sold += o.Qty
			}
			if page.Next == "" {
				break
			}
			q.After = page.Next
		}
		b, err := s.Snapshot(ctx, sku)
		if err != nil {
			return 0, 0, 0, err
		}
		if a.Version != b.Version || a.Stock != b.Stock || a.Held != b.Held || len(a.Pending) != len(b.Pending) {
			continue
		}
		for id, o := range a.Pending {
			if !seen[id] {
				sold += o.Qty
			}
		}
		return a.Stock, a.Held, sold, nil
	}
	return 0, 0, 0, fmt.Errorf("%q never held still for a reading", sku)
}

// unitsAddUp reports an error unless stock + held + sold = total, none
// negative, in a consistent reading.
func unitsAddUp(ctx context.Context, s *Store, sku string, total int64) (stock, held, sold int64, err error) {
	stock, held, sold, err = readUnits(ctx, s, sku)
	if err == nil && (stock < 0 || held < 0 || stock+held+sold != total) {
		err = fmt.Errorf("%q: available %d + held %d + sold %d = %d; want %d, none negative", sku, stock, held, sold, stock+held+sold, total)
	}
	return stock, held, sold, err
}

// checkUnits is unitsAddUp that fails the test.
func checkUnits(t *testing.T, s *Store, sku string, total int64) (stock, held, sold int64) {
	t.Helper()
	stock, held, sold, err := unitsAddUp(t.Context(), s, sku, total)
	if err != nil {
		t.Fatal(err)
	}
	return stock, held, sold
}

// TestPlainSalesLeaveHeldUnits: no strategy's sale takes a held unit,
// whatever its write path: every one conditions on the stock, and held
// units are not in it.
func TestPlainSalesLeaveHeldUnits(t *testing.T) {
	s := testStore(t)
	ctx := t.Context()
	sts := append(strategies(t, s), redisStockOn(t, s, testRedis(t), RedisStockOptions{}))
	b, err := NewBuckets(s, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range append(sts, b) {
		t.Run(st.Name(), func(t *testing.T) {
			sku := "plain-" + st.Name()
			mustPut(t, s, sku, 2)
			if _, err := NewAtomic(s).Hold(ctx, inventory.HoldRequest{SKU: sku, Qty: 1, TTL: 10 * time.Minute}); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Decrement(ctx, inventory.Request{SKU: sku, Qty: 2}); !errors.Is(err, inventory.ErrSoldOut) {
				t.Fatalf("sold 2 units of 1 not held: %v", err)
			}
			if _, err := st.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); !errors.Is(err, inventory.ErrSoldOut) {
				t.Fatalf("sold the held unit: %v", err)
			}
			if stock, held, sold := checkUnits(t, s, sku, 2); stock != 0 || held != 1 || sold != 1 {
				t.Fatalf("available %d held %d sold %d; want 0 1 1", stock, held, sold)
			}
		})
	}
}

// TestHoldLifecycle: a hold takes its units out of every strategy's
// reach; a confirm sells them once, however often it is sent; a release
// gives them back; bad input changes nothing.
func TestHoldLifecycle(t *testing.T) {
	s := testStore(t)
	ctx := t.Context()
	for _, h := range holders(t, s, newLockServices(t)) {
		t.Run(h.Name(), func(t *testing.T) {
			sku := "life-" + h.Name()
			mustPut(t, s, sku, 3)
			if _, err := h.Hold(ctx, inventory.HoldRequest{SKU: sku, Qty: 1, TTL: 16 * time.Minute}); !errors.Is(err, inventory.ErrInvalid) {
				t.Fatalf("ttl 16m: %v; want ErrInvalid", err)
			}
			hold, err := h.Hold(ctx, inventory.HoldRequest{SKU: sku, Qty: 2, TTL: 10 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if hold.State != inventory.HoldHeld || hold.Qty != 2 || !hold.Expires.Equal(hold.Created.Add(10*time.Minute)) {
				t.Fatalf("hold %+v", hold)
			}
			checkUnits(t, s, sku, 3)
			first, replayed, err := s.ConfirmHold(ctx, sku, hold.ID, "")
			if err != nil || replayed || first.OrderID != hold.ID || first.Qty != 2 {
				t.Fatalf("confirm: %+v, replayed %v, %v", first, replayed, err)
			}
			again, replayed, err := s.ConfirmHold(ctx, sku, hold.ID, "")
			if err != nil || !replayed || again.OrderID != first.OrderID {
				t.Fatalf("second confirm: %+v, replayed %v, %v; want order %s replayed", again, replayed, err, first.OrderID)
			}
			if _, err := s.ReleaseHold(ctx, sku, hold.ID); !errors.Is(err, inventory.ErrHoldConfirmed) {
				t.Fatalf("release of a confirmed hold: %v", err)
			}
			if stock, held, sold := checkUnits(t, s, sku, 3); stock != 1 || held != 0 || sold != 2 {
				t.Fatalf("after the confirm: %d, %d, %d", stock, held, sold)
			}
			two, err := h.Hold(ctx, inventory.HoldRequest{SKU: sku, Qty: 1, TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.Hold(ctx, inventory.HoldRequest{SKU: sku, Qty: 1, TTL: time.Minute}); !errors.Is(err, inventory.ErrSoldOut) {
				t.Fatalf("hold of a held unit: %v", err)
			}
			for range 2 {
				if r, err := s.ReleaseHold(ctx, sku, two.ID); err != nil || r.State != inventory.HoldReleased {
					t.Fatalf("release: %+v, %v", r, err)
				}
			}
			if _, _, err := s.ConfirmHold(ctx, sku, two.ID, ""); !errors.Is(err, inventory.ErrHoldReleased) {
				t.Fatalf("confirm of a released hold: %v", err)
			}
			if stock, held, _ := checkUnits(t, s, sku, 3); stock != 1 || held != 0 {
				t.Fatalf("after the release: stock %d held %d", stock, held)
			}
			if _, err := s.GetHold(ctx, sku, "nope"); !errors.Is(err, inventory.ErrHoldNotFound) {
				t.Fatalf("unknown hold: %v", err)
			}
		})
	}
}

// TestConfirmIdempotent: confirming a hold twice, before and after it is
// recorded in the holds collection, gives one order.
func TestConfirmIdempotent(t *testing.T) {
	s := testStore(t)
	ctx := t.Context()
	mustPut(t, s, "idem", 1)
	hold, err := NewAtomic(s).Hold(ctx, inventory.HoldRequest{SKU: "idem", Qty: 1, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 3 {
		sale, replayed, err := s.ConfirmHold(ctx, "idem", hold.ID, "confirm-key")
		if err != nil || replayed != (i > 0) {
			t.Fatalf("confirm %d: replayed %v, %v", i, replayed, err)
		}
		ids = append(ids, sale.OrderID)
		if i == 1 {
			if _, err := s.RecoverHolds(ctx); err != nil {
				t.Fatal(err)
			}
			if it := mustGet(t, s, "idem"); len(it.Holds) != 0 {
				t.Fatalf("the confirmed hold is still in the item after recovery: %+v", it.Holds)
			}
		}
	}
	if ids[0] != ids[1] || ids[1] != ids[2] || mustCount(t, s, "idem") != 1 {
		t.Fatalf("orders %v, %d in the ledger; want one", ids, mustCount(t, s, "idem"))
	}
	if h, err := s.GetHold(ctx, "idem", hold.ID); err != nil || h.State != inventory.HoldConfirmed {
		t.Fatalf("hold after recovery: %+v, %v", h, err)
	}
}

// TestExpiredHoldSellsAtOnce: a unit whose hold has expired by the
// store's clock is sold by the next sale of a strategy that takes part in
// holds, in its own update, with no sweeper; the hold then reads expired
// and its confirm is refused, selling nothing.
func TestExpiredHoldSellsAtOnce(t *testing.T) {
	s := testStore(t)
	ctx := t.Context()
	for _, h := range holders(t, s, newLockServices(t)) {
		t.Run(h.Name(), func(t *testing.T) {
			sku := "exp-" + h.Name()
			mustPut(t, s, sku, 1)
			hold := pastHold(t, s, sku, 1)
			sale, err := h.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1})
			if err != nil {
				t.Fatalf("sale of the unit of an expired hold: %v", err)
			}
			if got, err := s.GetHold(ctx, sku, hold.ID); err != nil || got.State != inventory.HoldExpired {
				t.Fatalf("hold: %+v, %v", got, err)
			}
			if _, _, err := s.ConfirmHold(ctx, sku, hold.ID, ""); !errors.Is(err, inventory.ErrHoldExpired) {
				t.Fatalf("confirm after the unit was sold: %v", err)
			}
			if stock, held, sold := checkUnits(t, s, sku, 1); stock != 0 || held != 0 || sold != 1 || sale.Qty != 1 {
				t.Fatalf("available %d held %d sold %d", stock, held, sold)
			}
		})
	}
	t.Run("not-a-holder", func(t *testing.T) {
		// A strategy that takes no part finds the stock short; the
		// units come back by one conditional update (the service's
		// sellOrReturn), then it sells.
		mustPut(t, s, "exp-other", 1)
		pastHold(t, s, "exp-other", 1)
		opt := NewOptimistic(s, 0, 0)
		if _, err := opt.Decrement(ctx, inventory.Request{SKU: "exp-other", Qty: 1}); !errors.Is(err, inventory.ErrSoldOut) {
			t.Fatalf("optimistic: %v", err)
		}
		// A replica that has not seen the sku's holds looks only after
		// its recovery pass.
		r := replicaStore(t, s, StoreOptions{Replica: "r"})
		if n, err := r.ReturnExpiredHolds(ctx, "exp-other"); n != 0 || err != nil {
			t.Fatalf("ReturnExpiredHolds on a replica that never saw a hold = %d, %v; want 0 with no read", n, err)
		}
		if n, err := s.ReturnExpiredHolds(ctx, "exp-other"); n != 1 || err != nil {
			t.Fatalf("ReturnExpiredHolds = %d, %v", n, err)
		}
		if _, err := opt.Decrement(ctx, inventory.Request{SKU: "exp-other", Qty: 1}); err != nil {
			t.Fatal(err)
		}
		checkUnits(t, s, "exp-other", 1)
	})
}

// TestConfirmStampedLate: a confirm that passed its look at the clock and
// then paused until the hold expired is judged by the store's clock at
// its write, and refused; the hold's units are then for sale.
func TestConfirmStampedLate(t *testing.T) {
	s := testStore(t)
	ctx := t.Context()
	mustPut(t, s, "late", 1)
	hold, err := NewAtomic(s).Hold(ctx, inventory.HoldRequest{SKU: "late", Qty: 1, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// The pause: by the time the stamp lands, the hold has expired (its
	// expiry moved to before now, as a minute would have done).
	s.beforeStamp = func() {
		s.beforeStamp = nil
		if _, err := s.items.UpdateOne(ctx, bson.D{{Key: "_id", Value: "late"}},
			bson.D{{Key: "$set", Value: bson.D{{Key: holdPath(hold.ID, "expires"), Value: hold.Created.Add(-time.Second)}}}}); err != nil {
			t.Error(err)
		}
	}
	if _, _, err := s.ConfirmHold(ctx, "late", hold.ID, ""); !errors.Is(err, inventory.ErrHoldExpired) {
		t.Fatalf("confirm stamped after the expiry: %v; want ErrHoldExpired", err)
	}
	if stock, held, sold := checkUnits(t, s, "late", 1); sold != 0 || stock+held != 1 {
		t.Fatalf("available %d held %d sold %d: the late confirm sold", stock, held, sold)
	}
	if _, err := NewAtomic(s).Decrement(ctx, inventory.Request{SKU: "late", Qty: 1}); err != nil {
		t.Fatalf("sale after the late confirm: %v", err)
	}
}

// TestHoldsIgnoreReplicaClocks: expiry is decided by the store's clock.
// A replica whose clock is an hour ahead cannot sell the unit of a live
// hold, nor return it; one whose clock is an hour behind cannot confirm
// a hold that has expired, and stamps its own holds by the store's clock.
func TestHoldsIgnoreReplicaClocks(t *testing.T) {
	base := testStore(t)
	ctx := t.Context()
	locks := newLockServices(t)
	ahead := replicaStore(t, base, StoreOptions{Replica: "ahead"})
	ahead.now = skewed(time.Hour)
	behind := replicaStore(t, base, StoreOptions{Replica: "behind"})
	behind.now = skewed(-time.Hour)

	mustPut(t, base, "skew-live", 1)
	live, err := NewAtomic(base).Hold(ctx, inventory.HoldRequest{SKU: "skew-live", Qty: 1, TTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range holders(t, ahead, locks) {
		if _, err := h.Decrement(ctx, inventory.Request{SKU: "skew-live", Qty: 1}); !errors.Is(err, inventory.ErrSoldOut) {
			t.Fatalf("%s on a replica an hour ahead sold the unit of a live hold: %v", h.Name(), err)
		}
	}
	if n, err := ahead.ReturnExpiredHolds(ctx, "skew-live"); n != 0 || err != nil {
		t.Fatalf("a replica an hour ahead returned %d units of a live hold (%v)", n, err)
	}
	if got, err := ahead.GetHold(ctx, "skew-live", live.ID); err != nil || got.State != inventory.HoldHeld {
		t.Fatalf("a replica an hour ahead reads the live hold as %+v, %v", got, err)
	}

	mustPut(t, base, "skew-past", 1)
	past := pastHold(t, base, "skew-past", 1)
	if _, _, err := behind.ConfirmHold(ctx, "skew-past", past.ID, ""); !errors.Is(err, inventory.ErrHoldExpired) {
		t.Fatalf("a replica an hour behind confirmed an expired hold: %v", err)
	}
	if mustCount(t, base, "skew-past") != 0 {
		t.Fatal("the refused confirm sold")
	}

	mustPut(t, base, "skew-own", 1)
	own, err := NewAtomic(behind).Hold(ctx, inventory.HoldRequest{SKU: "skew-own", Qty: 1, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	lower, err := base.storeTime(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if d := own.Expires.Sub(lower); d < 50*time.Second || d > 70*time.Second {
		t.Fatalf("a hold of a minute by a replica an hour behind expires %v after the store's now", d)
	}
}

// TestHoldTTLExpires: a real time to live runs out by the store's clock
// and the unit sells at once, with no sweeper; a confirm after it is
// refused, and one paused past it too. Slow: it waits for a 1 s TTL.
func TestHoldTTLExpires(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a hold's 1 s time to live")
	}
	s := testStore(t)
	ctx := t.Context()
	for _, h := range holders(t, s, newLockServices(t)) {
		t.Run(h.Name(), func(t *testing.T) {
			sku := "ttl-" + h.Name()
			mustPut(t, s, sku, 2)
			a, err := h.Hold(ctx, inventory.HoldRequest{SKU: sku, Qty: 1, TTL: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			b, err := h.Hold(ctx, inventory.HoldRequest{SKU: sku, Qty: 1, TTL: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); !errors.Is(err, inventory.ErrSoldOut) {
				t.Fatalf("sale while both units are held: %v", err)
			}
			// b's confirm pauses past the expiry, as a stopped replica
			// would, after its look at the clock.
			s.beforeStamp = func() { s.beforeStamp = nil; time.Sleep(1200 * time.Millisecond) }
			if _, _, err := s.ConfirmHold(ctx, sku, b.ID, ""); !errors.Is(err, inventory.ErrHoldExpired) {
				t.Fatalf("confirm paused past the expiry: %v; want ErrHoldExpired", err)
			}
			if _, _, err := s.ConfirmHold(ctx, sku, a.ID, ""); !errors.Is(err, inventory.ErrHoldExpired) {
				t.Fatalf("confirm after the expiry: %v; want ErrHoldExpired", err)
			}
			for i := range 2 {
				if _, err := h.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); err != nil {
					t.Fatalf("sale %d after the holds expired: %v", i, err)
				}
			}
			if stock, held, sold := checkUnits(t, s, sku, 2); stock != 0 || held != 0 || sold != 2 {
				t.Fatalf("available %d held %d sold %d", stock, held, sold)
			}
		})
	}
}

// TestHoldsNeverOversell: two replicas hold, confirm (some late on
// purpose), release, abandon and sell the same sku at once with every
// kind of strategy; every consistent reading has available + held + sold
// = stock, no late confirm sells, and once the holds have expired every
// unit sells, exactly once. Slow: holds of 1 s expire during it.
func TestHoldsNeverOversell(t *testing.T) {
	if testing.Short() {
		t.Skip("holds of 1 s expire during it")
	}
	base := testStore(t)
	ctx := t.Context()
	locks := newLockServices(t)
	const sku, total, ttl = "race", 20, 2 * time.Second
	mustPut(t, base, sku, total)
	type replica struct {
		s       *Store
		holders []inventory.Holder
		sellers []inventory.Strategy
	}
	var reps []replica
	for _, name := range []string{"a", "b"} {
		r := replicaStore(t, base, StoreOptions{Replica: name})
		hs := holders(t, r, locks)
		reps = append(reps, replica{r, hs, []inventory.Strategy{hs[0], hs[1], NewOptimistic(r, 0, 0), NewBatched(r, 0)}})
	}
	var (
		wg                          sync.WaitGroup
		confirmed, lateTried, plain atomic.Int64
		slow                        atomic.Int64
		mu                          sync.Mutex
		orders                      = map[string]bool{}
	)
	stop := make(chan struct{})
	var readings atomic.Int64
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, _, _, err := unitsAddUp(ctx, base, sku, total); err != nil {
				t.Error(err)
				return
			}
			readings.Add(1)
		}
	})
	var workers sync.WaitGroup
	for w := range 6 {
		workers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			rep := reps[w%2]
			for range 8 {
				if rng.IntN(3) == 0 {
					st := rep.sellers[rng.IntN(len(rep.sellers))]
					sale, err := st.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1})
					if err == nil {
						plain.Add(1)
						mu.Lock()
						orders[sale.OrderID] = true
						mu.Unlock()
					} else if !retryable(err) {
						t.Errorf("%s: %v", st.Name(), err)
					}
					continue
				}
				h := rep.holders[rng.IntN(len(rep.holders))]
				hold, err := h.Hold(ctx, inventory.HoldRequest{SKU: sku, Qty: 1, TTL: ttl})
				if retryable(err) {
					continue
				}
				if err != nil {
					t.Errorf("hold: %v", err)
					return
				}
				switch rng.IntN(4) {
				case 0: // confirm at once
					sale, _, err := rep.s.ConfirmHold(ctx, sku, hold.ID, "")
					if errors.Is(err, inventory.ErrHoldExpired) {
						slow.Add(1) // the machine was too slow for the ttl: allowed, and it sold nothing
						continue
					}
					if err != nil {
						t.Errorf("confirm in time: %v", err)
						continue
					}
					confirmed.Add(1)
					mu.Lock()
					orders[sale.OrderID] = true
					mu.Unlock()
				case 1: // confirm late, on purpose
					lateTried.Add(1)
					time.Sleep(ttl + 100*time.Millisecond) // past its expiry, which the store stamped after this worker's start
					if sale, _, err := rep.s.ConfirmHold(ctx, sku, hold.ID, ""); !errors.Is(err, inventory.ErrHoldExpired) {
						t.Errorf("late confirm of %s: %+v, %v; want ErrHoldExpired", hold.ID, sale, err)
					}
				case 2:
					if _, err := rep.s.ReleaseHold(ctx, sku, hold.ID); err != nil {
						t.Errorf("release: %v", err)
					}
				default: // abandoned: it expires
				}
			}
		})
	}
	workers.Wait()
	close(stop)
	wg.Wait()
	time.Sleep(ttl + 200*time.Millisecond) // every hold has expired
	for {
		sale, err := NewAtomic(base).Decrement(ctx, inventory.Request{SKU: sku, Qty: 1})
		if errors.Is(err, inventory.ErrSoldOut) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		orders[sale.OrderID] = true
	}
	stock, held, sold := checkUnits(t, base, sku, total)
	if stock != 0 || held != 0 || sold != total || int64(len(orders)) != total {
		t.Fatalf("after the holds expired: available %d held %d sold %d, %d orders acknowledged; want 0 0 %d %d", stock, held, sold, len(orders), total, total)
	}
	for _, o := range allOrders(t, base, sku, time.Time{}) {
		if !orders[o.ID] {
			t.Errorf("order %s in the ledger was never acknowledged", o.ID)
		}
	}
	t.Logf("%d holds confirmed (%d too slow for the ttl), %d late confirms refused, %d plain sales, %d consistent readings",
		confirmed.Load(), slow.Load(), lateTried.Load(), plain.Load(), readings.Load())
}

// retryable reports whether err is an answer of a concurrent test that
// changed nothing and may come from the race itself.
func retryable(err error) bool {
	for _, e := range []error{inventory.ErrSoldOut, inventory.ErrStale, inventory.ErrConflict, inventory.ErrLockUnavailable, inventory.ErrFenced} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// BenchmarkExpiredHoldSale times one atomic sale of the last unit: from
// stock (plain), and from a hold whose expiry has passed (expired-hold:
// the sale finds the stock short, reads the item and the store's clock,
// and returns the hold's units in its own update, then records the hold).
// The second is how long an expired unit takes to sell, sweeper or not.
//
//	go test -run '^$' -bench ExpiredHoldSale -benchtime 200x ./pkg/inventory/mongostore/
func BenchmarkExpiredHoldSale(b *testing.B) {
	for _, expired := range []bool{false, true} {
		name := "plain"
		if expired {
			name = "expired-hold"
		}
		b.Run(name, func(b *testing.B) {
			s := testStore(b)
			a := NewAtomic(s)
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				sku := fmt.Sprintf("bench-%d", i)
				if expired {
					mustPut(b, s, sku, 1)
					pastHold(b, s, sku, 1)
				} else {
					mustPut(b, s, sku, 1)
				}
				b.StartTimer()
				if _, err := a.Decrement(context.Background(), inventory.Request{SKU: sku, Qty: 1}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestHoldKeysRecovered: a keyed create whose replica stopped before it
// ended its attempt is settled by recovery as it is: a hold that landed
// is found (in the item, or recorded after its confirm) and its key
// replays it; a hold that never landed is given up, its late write
// refused, and the key holds anew.
func TestHoldKeysRecovered(t *testing.T) {
	s := testStore(t)
	b := replicaStore(t, s, StoreOptions{Replica: "b"})
	ctx := t.Context()
	mustPut(t, s, "hk", 3)
	// begin leaves a reserved key with its attempt, as a replica that
	// stopped after reserving it would.
	begin := func(key string) keyRecord {
		t.Helper()
		req := inventory.Request{SKU: "hk", Qty: 1, Key: key}
		rec, err := s.newKeyRecord(ctx, req, fingerprint(req, "hold  60000"))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.beginAttempt(ctx, rec); err != nil {
			t.Fatal(err)
		}
		if _, err := s.keys.InsertOne(ctx, rec); err != nil {
			t.Fatal(err)
		}
		s.inFlight.remove(rec.OrderID)
		return rec
	}
	landed := begin("A")
	if _, err := NewAtomic(s).Hold(ctx, inventory.HoldRequest{SKU: "hk", Qty: 1, TTL: time.Minute, ID: landed.OrderID, Key: "A"}); err != nil {
		t.Fatal(err)
	}
	lost := begin("B")
	if got, err := s.RecoverKeys(ctx); err != nil || got.Settled != 1 || got.Abandoned != 1 {
		t.Fatalf("recovery: %+v, %v; want A settled (its hold landed) and B given up", got, err)
	}
	if _, err := NewAtomic(s).Hold(ctx, inventory.HoldRequest{SKU: "hk", Qty: 1, TTL: time.Minute, ID: lost.OrderID, Key: "B"}); !errors.Is(err, inventory.ErrAbandoned) {
		t.Fatalf("the given-up attempt's late hold: %v; want ErrAbandoned", err)
	}
	a := inventory.HoldRequest{SKU: "hk", Qty: 1, TTL: time.Minute, Key: "A"}
	h, replayed, err := b.HoldOnce(ctx, NewAtomic(b), a, "")
	if err != nil || !replayed || h.ID != landed.OrderID {
		t.Fatalf("key A again: %+v, replayed %v, %v; want hold %s replayed", h, replayed, err, landed.OrderID)
	}
	if _, replayed, err := b.HoldOnce(ctx, NewAtomic(b), inventory.HoldRequest{SKU: "hk", Qty: 1, TTL: time.Minute, Key: "B"}, ""); err != nil || replayed {
		t.Fatalf("key B again: replayed %v, %v; want a new hold", replayed, err)
	}
	if _, _, err := s.ConfirmHold(ctx, "hk", landed.OrderID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecoverHolds(ctx); err != nil {
		t.Fatal(err)
	}
	if h, replayed, err := b.HoldOnce(ctx, NewAtomic(b), a, ""); err != nil || !replayed || h.State != inventory.HoldConfirmed {
		t.Fatalf("key A after its hold was confirmed and recorded: %+v, replayed %v, %v", h, replayed, err)
	}
	if stock, held, sold := checkUnits(t, s, "hk", 3); stock != 1 || held != 1 || sold != 1 {
		t.Fatalf("available %d held %d sold %d; want 1 1 1: one hold per key", stock, held, sold)
	}
}
