package mongostore

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"

	"github.com/stocklock/stocklock/pkg/strategy"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/stocklock/stocklock/pkg/lock"
)

// replicaStore returns a second Store on s's database, as another replica
// would have, with opts applied.
func replicaStore(t testing.TB, s *Store, opts StoreOptions) *Store {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
	}
	r, err := NewStore(s.items.Database(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// lockServices stands for two independent lock services that all replicas
// share, as mongo-lease's and redis-lock's are.
type lockServices map[string]*lock.Locker

func newLockServices(t *testing.T) lockServices {
	return lockServices{strategy.MongoLease: localLocker(t), strategy.RedisLock: localLocker(t)}
}

// safeStrategies returns every safe strategy over s: the two lock
// strategies of locks, optimistic and atomic.
func safeStrategies(t *testing.T, s *Store, locks lockServices) []inventory.Strategy {
	t.Helper()
	var out []inventory.Strategy
	for _, name := range []string{strategy.MongoLease, strategy.RedisLock} {
		st, err := NewLocked(s, LockedConfig{Name: name, Locker: locks[name], Fencing: true})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, st)
	}
	return append(out, NewOptimistic(s, 0, 0), NewAtomic(s))
}

// sellAll sends requests decrements of one unit of sku, spread over sts,
// all at once, and returns the acknowledged sales.
func sellAll(t *testing.T, sts []inventory.Strategy, sku string, requests int) []inventory.Sale {
	t.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		sales []inventory.Sale
	)
	for i := range requests {
		st := sts[i%len(sts)]
		wg.Go(func() {
			sale, err := st.Decrement(context.Background(), inventory.Request{SKU: sku, Qty: 1})
			if err != nil {
				if !errors.Is(err, inventory.ErrSoldOut) && !errors.Is(err, inventory.ErrConflict) && !errors.Is(err, inventory.ErrLockUnavailable) && !errors.Is(err, inventory.ErrStale) {
					t.Errorf("%s: %v", st.Name(), err)
				}
				return
			}
			mu.Lock()
			sales = append(sales, sale)
			mu.Unlock()
		})
	}
	wg.Wait()
	return sales
}

// checkBooks asserts that sku's stock (summed over its buckets, if split)
// went down by exactly the units of the acknowledged sales, and that the
// ledger holds exactly those orders, none pending.
func checkBooks(t *testing.T, s *Store, sku string, initial int64, sales []inventory.Sale) {
	t.Helper()
	var units int64
	for _, sale := range sales {
		units += sale.Qty
	}
	it, err := s.Snapshot(t.Context(), sku)
	if err != nil {
		t.Fatalf("Snapshot(%q): %v", sku, err)
	}
	if units > initial || it.Stock != initial-units {
		t.Errorf("%s: %d units acknowledged of %d, stock now %d: oversold or lost", sku, units, initial, it.Stock)
	}
	orders := allOrders(t, s, sku, time.Time{})
	inLedger := map[string]bool{}
	for _, o := range orders {
		inLedger[o.ID] = true
	}
	for _, sale := range sales {
		if !inLedger[sale.OrderID] {
			t.Errorf("%s: acknowledged order %s is not in the ledger", sku, sale.OrderID)
		}
	}
	if len(orders) != len(sales) {
		t.Errorf("%s: ledger has %d orders, %d sales acknowledged", sku, len(orders), len(sales))
	}
	if len(it.Pending) != 0 {
		t.Errorf("%s: %d orders still pending", sku, len(it.Pending))
	}
}

// TestMixedWritersOneSKU runs every safe strategy at once on one sku, from
// two replicas: two lock services, compare-and-set and the atomic update
// must not sell a unit twice between them.
func TestMixedWritersOneSKU(t *testing.T) {
	a := testStore(t)
	b := replicaStore(t, a, StoreOptions{Replica: "b"})
	locks := newLockServices(t)
	sts := append(safeStrategies(t, a, locks), safeStrategies(t, b, locks)...)
	for run := range 3 {
		sku := "mixed-" + string(rune('a'+run))
		const stock = 12
		mustPut(t, a, sku, stock)
		sales := sellAll(t, sts, sku, 40)
		if len(sales) != stock {
			t.Errorf("%s: sold %d of %d", sku, len(sales), stock)
		}
		checkBooks(t, a, sku, stock, sales)
	}
}

// TestPutRacesLockHolder resets the stock between a lock holder's read and
// its write: the holder's write, computed from the old stock, must be
// refused, and the reset must stand.
func TestPutRacesLockHolder(t *testing.T) {
	s := testStore(t)
	mustPut(t, s, "reset", 5)
	st, err := NewLocked(s, LockedConfig{Name: strategy.RedisLock, Locker: localLocker(t), Fencing: true})
	if err != nil {
		t.Fatal(err)
	}
	st.afterRead = func(ctx context.Context) {
		if _, err := s.Put(ctx, "reset", 100); err != nil {
			t.Errorf("Put: %v", err)
		}
	}
	if _, err := st.Decrement(t.Context(), inventory.Request{SKU: "reset", Qty: 1}); !errors.Is(err, inventory.ErrStale) {
		t.Fatalf("Decrement across a reset: %v, want inventory.ErrStale", err)
	}
	if it := mustGet(t, s, "reset"); it.Stock != 100 || len(it.Pending) != 0 {
		t.Fatalf("item = %+v, want the reset's stock 100 and nothing pending", it)
	}
	if n := mustCount(t, s, "reset"); n != 0 {
		t.Fatalf("orders = %d, want 0", n)
	}
}

func TestPutIf(t *testing.T) {
	s := testStore(t)
	it := mustPut(t, s, "cas", 5)
	if _, err := s.PutIf(t.Context(), "cas", 7, it.Version+1); !errors.Is(err, inventory.ErrStale) {
		t.Fatalf("PutIf at a wrong version: %v, want inventory.ErrStale", err)
	}
	if _, err := s.PutIf(t.Context(), "nope", 7, 1); !errors.Is(err, inventory.ErrNotFound) {
		t.Fatalf("PutIf of a missing item: %v, want inventory.ErrNotFound", err)
	}
	got, err := s.PutIf(t.Context(), "cas", 7, it.Version)
	if err != nil || got.Stock != 7 || got.Version != it.Version+1 {
		t.Fatalf("PutIf at the current version: %+v, %v", got, err)
	}
}

// TestLeaseExpiredBeforeWatchdog: a holder that wakes past its lease's
// expiry before its watchdog has run must not send the write.
func TestLeaseExpiredBeforeWatchdog(t *testing.T) {
	s := testStore(t)
	mustPut(t, s, "late", 5)
	st, err := NewLocked(s, LockedConfig{Name: strategy.MongoLease, Locker: localLocker(t), Fencing: true})
	if err != nil {
		t.Fatal(err)
	}
	// The process "slept" through its lease: its clock is past the expiry,
	// and the watchdog (on the real clock) has not noticed.
	st.now = func() time.Time { return time.Now().Add(time.Hour) }
	if _, err := st.Decrement(t.Context(), inventory.Request{SKU: "late", Qty: 1}); !errors.Is(err, inventory.ErrLeaseLost) {
		t.Fatalf("Decrement past the lease's expiry: %v, want inventory.ErrLeaseLost", err)
	}
	if it := mustGet(t, s, "late"); it.Stock != 5 || it.Version != 1 {
		t.Fatalf("item = %+v, want stock 5 at version 1", it)
	}
}

// dieAfterTake returns an AfterTake hook that ends the calling goroutine,
// as a kill of the replica would, after every nth stock write, before the
// order is recorded; and a counter of the deaths.
func dieAfterTake(n int64) (func(inventory.Order), *atomic.Int64) {
	var writes, deaths atomic.Int64
	return func(inventory.Order) {
		if writes.Add(1)%n == 0 {
			deaths.Add(1)
			runtime.Goexit()
		}
	}, &deaths
}

// dieInside runs sell on a replica of a's database that dies right after
// its first stock write, and returns once the selling goroutine has ended.
func dieInside(t *testing.T, a *Store, sell func(dying *Store)) {
	t.Helper()
	hook, _ := dieAfterTake(1)
	dying := replicaStore(t, a, StoreOptions{Replica: "dying", AfterTake: hook})
	done := make(chan struct{})
	go func() {
		defer close(done)
		sell(dying)
	}()
	<-done
}

// TestCrashBetweenStockAndLedger kills a replica's requests between the
// stock write and the ledger write, under load, for every strategy; the
// other replica's recovery must then make units taken equal orders, with
// every acknowledged sale among them.
func TestCrashBetweenStockAndLedger(t *testing.T) {
	a := testStore(t)
	hook, deaths := dieAfterTake(3)
	dying := replicaStore(t, a, StoreOptions{Replica: "dying", AfterTake: hook})
	sts := append(strategies(t, dying)[1:], safeStrategies(t, dying, newLockServices(t))[:2]...)
	for _, st := range append(sts, newBuckets(t, dying, 4)) {
		t.Run(st.Name(), func(t *testing.T) {
			sku := "crash-" + st.Name()
			const stock = 9
			mustPut(t, a, sku, stock)
			var (
				wg    sync.WaitGroup
				mu    sync.Mutex
				sales []inventory.Sale
			)
			for range 12 {
				wg.Go(func() {
					sale, err := st.Decrement(context.Background(), inventory.Request{SKU: sku, Qty: 1})
					if err == nil {
						mu.Lock()
						sales = append(sales, sale)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			idle(st)
			it := mustSnapshot(t, a, sku)
			taken := stock - it.Stock
			if len(it.Pending) == 0 {
				t.Fatalf("no pending order after %d deaths: the hook did not fire", deaths.Load())
			}
			n, err := a.RecoverPending(t.Context(), 0)
			if err != nil {
				t.Fatal(err)
			}
			if n != len(it.Pending) {
				t.Errorf("recovered %d orders, %d were pending", n, len(it.Pending))
			}
			if orders := mustCount(t, a, sku); orders != taken {
				t.Errorf("units taken %d, orders %d", taken, orders)
			}
			got := allOrders(t, a, sku, time.Time{})
			ids := map[string]bool{}
			for _, o := range got {
				ids[o.ID] = true
				if o.Replica != "dying" || o.Strategy != st.Name() {
					t.Errorf("recovered order %+v: want the replica and strategy that sold it", o)
				}
			}
			for _, s := range sales {
				if !ids[s.OrderID] {
					t.Errorf("acknowledged order %s not in the ledger", s.OrderID)
				}
			}
			if it := mustSnapshot(t, a, sku); len(it.Pending) != 0 {
				t.Errorf("still pending after recovery: %v", it.Pending)
			}
		})
	}
}

// TestRecoverPendingGrace leaves young pending orders to their replica.
func TestRecoverPendingGrace(t *testing.T) {
	a := testStore(t)
	mustPut(t, a, "young", 3)
	dieInside(t, a, func(dying *Store) {
		_, _ = NewAtomic(dying).Decrement(context.Background(), inventory.Request{SKU: "young", Qty: 1})
	})
	if n, err := a.RecoverPending(t.Context(), time.Hour); err != nil || n != 0 {
		t.Fatalf("RecoverPending with an hour's grace: %d, %v; want 0 recovered", n, err)
	}
	if n, err := a.RecoverPending(t.Context(), 0); err != nil || n != 1 {
		t.Fatalf("RecoverPending: %d, %v; want 1 recovered", n, err)
	}
	if o := allOrders(t, a, "young", time.Time{}); len(o) != 1 || o[0].Remaining != nil {
		t.Fatalf("orders = %+v: want one atomic order whose remaining is unknown", o)
	}
}

// TestRecoverPendingCountsOnlyItsOwn: a pending order that is already in
// the ledger (its seller recorded it, but the unpend was lost) has its
// entry cleared by recovery, which does not count it as recovered.
func TestRecoverPendingCountsOnlyItsOwn(t *testing.T) {
	a := testStore(t)
	mustPut(t, a, "counted", 3)
	for range 2 {
		dieInside(t, a, func(dying *Store) {
			_, _ = NewAtomic(dying).Decrement(context.Background(), inventory.Request{SKU: "counted", Qty: 1})
		})
	}
	it := mustGet(t, a, "counted")
	if len(it.Pending) != 2 {
		t.Fatalf("%d pending orders, want 2", len(it.Pending))
	}
	for id, o := range it.Pending {
		o.ID, o.SKU = id, "counted"
		if _, err := a.orders.InsertOne(t.Context(), o); err != nil {
			t.Fatal(err)
		}
		break
	}
	if n, err := a.RecoverPending(t.Context(), 0); err != nil || n != 1 {
		t.Fatalf("RecoverPending = %d, %v; want 1: one of the two was in the ledger already", n, err)
	}
	if it := mustGet(t, a, "counted"); len(it.Pending) != 0 {
		t.Fatalf("still pending: %v", it.Pending)
	}
	if n := mustCount(t, a, "counted"); n != 2 {
		t.Fatalf("orders = %d, want 2", n)
	}
}

func TestDecrementOnce(t *testing.T) {
	a := testStore(t)
	b := replicaStore(t, a, StoreOptions{Replica: "b"})
	ctx := t.Context()
	mustPut(t, a, "idem", 5)

	first, replayed, err := a.DecrementOnce(ctx, NewAtomic(a), inventory.Request{SKU: "idem", Qty: 2, Key: "k1"}, "atomic")
	if err != nil || replayed || first.Key != "k1" {
		t.Fatalf("first: %+v, replayed %v, %v", first, replayed, err)
	}
	// Retried on the other replica, with another strategy object.
	again, replayed, err := b.DecrementOnce(ctx, NewAtomic(b), inventory.Request{SKU: "idem", Qty: 2, Key: "k1"}, "atomic")
	if err != nil || !replayed || again.OrderID != first.OrderID || again.Remaining != first.Remaining || again.Replica != first.Replica {
		t.Fatalf("retry: %+v, replayed %v, %v; want the first sale %+v replayed", again, replayed, err, first)
	}
	if _, _, err := b.DecrementOnce(ctx, NewAtomic(b), inventory.Request{SKU: "idem", Qty: 1, Key: "k1"}, "atomic"); !errors.Is(err, inventory.ErrKeyReused) {
		t.Fatalf("same key, other qty: %v, want inventory.ErrKeyReused", err)
	}
	if _, _, err := b.DecrementOnce(ctx, NewAtomic(b), inventory.Request{SKU: "idem", Qty: 2, Key: "k1"}, "optimistic"); !errors.Is(err, inventory.ErrKeyReused) {
		t.Fatalf("same key, other strategy: %v, want inventory.ErrKeyReused", err)
	}
	// The same key on another sku is another key.
	mustPut(t, a, "idem2", 1)
	if _, replayed, err := a.DecrementOnce(ctx, NewAtomic(a), inventory.Request{SKU: "idem2", Qty: 1, Key: "k1"}, "atomic"); err != nil || replayed {
		t.Fatalf("same key on another sku: replayed %v, %v", replayed, err)
	}
	if it := mustGet(t, a, "idem"); it.Stock != 3 {
		t.Fatalf("stock = %d, want 3: sold once", it.Stock)
	}
	if n := mustCount(t, a, "idem"); n != 1 {
		t.Fatalf("orders = %d, want 1", n)
	}

	// A decrement that changed nothing frees its key.
	mustPut(t, a, "idem3", 0)
	if _, _, err := a.DecrementOnce(ctx, NewAtomic(a), inventory.Request{SKU: "idem3", Qty: 1, Key: "k"}, ""); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("sold out: %v", err)
	}
	mustPut(t, a, "idem3", 1)
	if _, replayed, err := a.DecrementOnce(ctx, NewAtomic(a), inventory.Request{SKU: "idem3", Qty: 1, Key: "k"}, ""); err != nil || replayed {
		t.Fatalf("retry after restock: replayed %v, %v; want a sale", replayed, err)
	}
	for _, key := range []string{"", string(make([]byte, inventory.MaxKeyLen+1)), "tab\tkey", "é"} {
		if _, _, err := a.DecrementOnce(ctx, NewAtomic(a), inventory.Request{SKU: "idem3", Qty: 1, Key: key}, ""); !errors.Is(err, inventory.ErrInvalid) {
			t.Errorf("key %q: %v, want inventory.ErrInvalid", key, err)
		}
	}
}

// TestDecrementOnceConcurrent sends one key eight times at once, through
// two replicas and a slow lock strategy: exactly one sale; every caller gets
// it or ErrInProgress.
func TestDecrementOnceConcurrent(t *testing.T) {
	a := testStore(t)
	b := replicaStore(t, a, StoreOptions{Replica: "b"})
	mustPut(t, a, "burst", 10)
	mk := func(s *Store) inventory.Strategy {
		st, err := NewLocked(s, LockedConfig{Name: strategy.RedisLock, Locker: localLocker(t), Fencing: true, Delay: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	sts := []inventory.Strategy{mk(a), mk(b)}
	stores := []*Store{a, b}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		orderIDs = map[string]int{}
		fresh    int
	)
	for i := range 8 {
		wg.Go(func() {
			sale, replayed, err := stores[i%2].DecrementOnce(context.Background(), sts[i%2], inventory.Request{SKU: "burst", Qty: 1, Key: "same"}, "redis-lock")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				orderIDs[sale.OrderID]++
				if !replayed {
					fresh++
				}
			case !errors.Is(err, inventory.ErrInProgress):
				t.Errorf("duplicate request: %v", err)
			}
		})
	}
	wg.Wait()
	if len(orderIDs) != 1 || fresh != 1 {
		t.Fatalf("order ids %v, %d fresh sales: want one order, sold once", orderIDs, fresh)
	}
	if it := mustGet(t, a, "burst"); it.Stock != 9 {
		t.Fatalf("stock = %d, want 9", it.Stock)
	}
}

// TestDecrementOnceAfterCrash: the replica dies between its stock write and
// its ledger write; the client retries the key on the other replica and
// gets the sale back, and the ledger gets its order.
func TestDecrementOnceAfterCrash(t *testing.T) {
	a := testStore(t)
	mustPut(t, a, "crashkey", 4)
	dieInside(t, a, func(dying *Store) {
		_, _, _ = dying.DecrementOnce(context.Background(), NewAtomic(dying), inventory.Request{SKU: "crashkey", Qty: 1, Key: "retry-me"}, "")
	})
	sale, replayed, err := a.DecrementOnce(t.Context(), NewAtomic(a), inventory.Request{SKU: "crashkey", Qty: 1, Key: "retry-me"}, "")
	if err != nil || !replayed || sale.Replica != "dying" {
		t.Fatalf("retry after the crash: %+v, replayed %v, %v; want the dead replica's sale", sale, replayed, err)
	}
	if it := mustGet(t, a, "crashkey"); it.Stock != 3 || len(it.Pending) != 0 {
		t.Fatalf("item = %+v, want stock 3 and nothing pending", it)
	}
	if n := mustCount(t, a, "crashkey"); n != 1 {
		t.Fatalf("orders = %d, want 1", n)
	}
}

func TestRecoverKeys(t *testing.T) {
	a := testStore(t)
	r := replicaStore(t, a, StoreOptions{Replica: "r", AbandonAfter: time.Millisecond, KeyRetention: time.Hour})
	ctx := t.Context()
	mustPut(t, a, "keys", 5)
	old := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	insert := func(coll *mongo.Collection, doc any) {
		t.Helper()
		if _, err := coll.InsertOne(ctx, doc); err != nil {
			t.Fatal(err)
		}
	}
	// A reservation whose replica died before its stock write.
	abandoned := keyRecord{ID: "keys/abandoned", SKU: "keys", Key: "abandoned", Request: fingerprint(inventory.Request{SKU: "keys", Qty: 1}, "x"), OrderID: newOrderID(), At: old}
	insert(a.attempts, attempt{OrderID: abandoned.OrderID, KeyID: abandoned.ID, At: old})
	insert(a.keys, abandoned)
	// A reservation whose sale is in the ledger but whose attempt was
	// never ended.
	sold, _, err := a.DecrementOnce(ctx, NewAtomic(a), inventory.Request{SKU: "keys", Qty: 1, Key: "sold"}, "")
	if err != nil {
		t.Fatal(err)
	}
	insert(a.attempts, attempt{OrderID: sold.OrderID, KeyID: "keys/sold", At: old})
	// An attempt whose reservation has not landed (and may yet, from a
	// paused replica).
	never := newOrderID()
	insert(a.attempts, attempt{OrderID: never, KeyID: "keys/never", At: old})
	// A key past the retention, and one whose attempt is younger than
	// AbandonAfter's millisecond would suggest is left alone: its at is
	// in the future.
	insert(a.keys, keyRecord{ID: "keys/ancient", SKU: "keys", Key: "ancient", Request: "x", OrderID: newOrderID(), At: old.Add(-2 * time.Hour)})
	young := keyRecord{ID: "keys/young", SKU: "keys", Key: "young", Request: "x", OrderID: newOrderID(), At: time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)}
	insert(a.attempts, attempt{OrderID: young.OrderID, KeyID: young.ID, At: young.At})
	insert(a.keys, young)

	got, err := r.RecoverKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got != (KeyRecovery{Expired: 1, Settled: 1, Abandoned: 2, Compacted: 2}) {
		t.Fatalf("RecoverKeys = %+v, want one expired, one settled, two given up and their fences compacted", got)
	}
	// The two given up are fenced out of the item, below aborted_through;
	// the young attempt still open is above them.
	it, err := a.getDoc(ctx, a.items, "keys")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{abandoned.OrderID, never} {
		if !gaveUp(it, inventory.Order{ID: id, Key: "k"}) {
			t.Fatalf("item %+v: %s not given up", it, id)
		}
	}
	if len(it.Aborted) != 0 || gaveUp(it, inventory.Order{ID: young.OrderID, Key: "young"}) {
		t.Fatalf("item %+v: want the fences compacted, the young attempt above them", it)
	}
	keys := map[string]keyRecord{}
	for _, rec := range findAll[keyRecord](t, a.keys) {
		keys[rec.ID] = rec
	}
	if len(keys) != 3 || keys["keys/sold"].free() || !keys["keys/abandoned"].free() || keys["keys/young"].free() {
		t.Fatalf("keys left: %+v, want keys/sold, keys/abandoned freed, keys/young", keys)
	}
	if atts := findAll[attempt](t, a.attempts); len(atts) != 1 || atts[0].OrderID != young.OrderID {
		t.Fatalf("attempts left: %+v, want only the young one", atts)
	}
	// The abandoned key is taken over; the sold one still replays.
	again, replayed, err := a.DecrementOnce(ctx, NewAtomic(a), inventory.Request{SKU: "keys", Qty: 1, Key: "abandoned"}, "x")
	if err != nil || replayed || again.OrderID == abandoned.OrderID {
		t.Fatalf("abandoned key reused: %+v, replayed %v, %v", again, replayed, err)
	}
	replay, replayed, err := a.DecrementOnce(ctx, NewAtomic(a), inventory.Request{SKU: "keys", Qty: 1, Key: "sold"}, "")
	if err != nil || !replayed || replay.OrderID != sold.OrderID {
		t.Fatalf("sold key: %+v, replayed %v, %v", replay, replayed, err)
	}
	if again, replayed, err := a.DecrementOnce(ctx, NewAtomic(a), inventory.Request{SKU: "keys", Qty: 1, Key: "abandoned"}, "x"); err != nil || !replayed || again.OrderID == abandoned.OrderID {
		t.Fatalf("taken-over key: %+v, replayed %v, %v; want its new sale replayed", again, replayed, err)
	}
}

func findAll[T any](t *testing.T, coll *mongo.Collection) []T {
	t.Helper()
	cur, err := coll.Find(t.Context(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var all []T
	if err := cur.All(t.Context(), &all); err != nil {
		t.Fatal(err)
	}
	return all
}

// TestIdempotencyIndex: the idempotency collection has an index on its
// time (a TTL index where the server supports one).
func TestIdempotencyIndex(t *testing.T) {
	s := testStore(t)
	specs, err := s.keys.Indexes().ListSpecifications(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range specs {
		if sp.Name == "at_1" {
			return
		}
	}
	t.Fatalf("no index on the idempotency keys' time: %+v", specs)
}

// TestReplayWhileRecording: a retry that arrives between the stock write and
// the ledger write records the pending order itself and replays the sale
// with its remaining stock; the seller's own record then finds it done.
func TestReplayWhileRecording(t *testing.T) {
	a := testStore(t)
	mustPut(t, a, "mid", 5)
	taken, resume := make(chan struct{}), make(chan struct{})
	seller := replicaStore(t, a, StoreOptions{Replica: "seller", AfterTake: func(inventory.Order) {
		close(taken)
		<-resume
	}})
	first := make(chan inventory.Sale, 1)
	go func() {
		sale, _, err := seller.DecrementOnce(context.Background(), NewOptimistic(seller, 0, 0), inventory.Request{SKU: "mid", Qty: 2, Key: "k"}, "")
		if err != nil {
			t.Errorf("first request: %v", err)
		}
		first <- sale
	}()
	<-taken
	replay, replayed, err := a.DecrementOnce(t.Context(), NewOptimistic(a, 0, 0), inventory.Request{SKU: "mid", Qty: 2, Key: "k"}, "")
	close(resume)
	if err != nil || !replayed || replay.Remaining != 3 || replay.Replica != "seller" {
		t.Fatalf("retry mid-sale: %+v, replayed %v, %v; want the seller's sale, 3 left", replay, replayed, err)
	}
	if sale := <-first; sale.OrderID != replay.OrderID || sale.LedgerErr != nil {
		t.Fatalf("the seller's answer %+v differs from the replay %+v", sale, replay)
	}
	if o := allOrders(t, a, "mid", time.Time{}); len(o) != 1 || o[0].Remaining == nil || *o[0].Remaining != 3 {
		t.Fatalf("ledger = %+v, want one order that left 3", o)
	}
}
