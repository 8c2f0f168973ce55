package mongostore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// soldOutTally is a SoldOutObserver that counts.
type soldOutTally struct {
	mu     sync.Mutex
	byPath map[string]int
	reads  int
	joined int
}

func (o *soldOutTally) SoldOutAnswered(_, path string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.byPath == nil {
		o.byPath = map[string]int{}
	}
	o.byPath[path]++
}

func (o *soldOutTally) SoldOutRead(_ string, sales int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reads++
	o.joined += sales
}

// counts returns the sold outs by read, by strategy, and the reads.
func (o *soldOutTally) counts() (byRead, byStrategy, reads int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.byPath[SoldOutByRead], o.byPath[SoldOutByStrategy], o.reads
}

// writeCountedStore returns a Store of its own database through a client
// that counts every write command it sends (insert, update, delete,
// findAndModify), on any collection, and the finds on the items.
func writeCountedStore(t *testing.T) (*Store, *atomic.Int64) {
	s, writes, _, _ := countingStore(t)
	return s, writes
}

// countingStore is writeCountedStore that counts the finds on the items
// too, and logs every write command (its name and collection): written(n)
// returns those from the n-th on.
func countingStore(t *testing.T) (s *Store, writes, finds *atomic.Int64, written func(n int64) []string) {
	t.Helper()
	writes, finds = new(atomic.Int64), new(atomic.Int64)
	var (
		mu  sync.Mutex
		log []string
	)
	written = func(n int64) []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), log[min(int(n), len(log)):]...)
	}
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		switch e.CommandName {
		case "insert", "update", "delete", "findAndModify":
			coll, _ := e.Command.Lookup(e.CommandName).StringValueOK()
			mu.Lock()
			log = append(log, e.CommandName+" "+coll)
			writes.Add(1)
			mu.Unlock()
		case "find":
			if coll, ok := e.Command.Lookup("find").StringValueOK(); ok && coll == "items" {
				finds.Add(1)
			}
		}
	}}
	c, err := mongo.Connect(options.Client().ApplyURI(mongoURI).SetMonitor(mon))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	s, err = NewStore(c.Database(testDB(t).Name()), StoreOptions{Replica: "counted", Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureIndexes(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s, writes, finds, written
}

// shortcutCase is one strategy with the shortcut in front of it, as the
// service builds it (SplitAware, then SoldOutShortcut).
type shortcutCase struct {
	raw inventory.Strategy
	st  inventory.Strategy
	obs *soldOutTally
}

// shortcutStrategies returns every safe strategy over s, each wrapped as
// the service wraps it: both lock strategies of locks, optimistic,
// atomic, batched, buckets and redis-stock.
func shortcutStrategies(t *testing.T, s *Store, locks lockServices) []shortcutCase {
	t.Helper()
	raw := append(safeStrategies(t, s, locks), NewBatched(s, 0), newBuckets(t, s, 4), redisStockOn(t, s, testRedis(t), RedisStockOptions{}))
	var out []shortcutCase
	for _, r := range raw {
		sa, err := newSplitAware(r, s, 4)
		if err != nil {
			t.Fatal(err)
		}
		obs := &soldOutTally{}
		w := newSoldOutShortcut(sa, s, obs)
		if w == sa {
			t.Fatalf("%s: SoldOutShortcut returned it as it is", r.Name())
		}
		out = append(out, shortcutCase{raw: r, st: w, obs: obs})
	}
	return out
}

// waitQuiet waits until sku has no order pending and writes stay still
// for a while: the ledger and unpend writes of the sales before are done.
func waitQuiet(t *testing.T, s *Store, sku string, writes *atomic.Int64, sts ...inventory.Strategy) {
	t.Helper()
	idle(sts...)
	for range 100 {
		before := writes.Load()
		time.Sleep(30 * time.Millisecond)
		if it := mustSnapshot(t, s, sku); len(it.Pending) == 0 && writes.Load() == before {
			return
		}
	}
	t.Fatalf("%s: writes never stopped", sku)
}

// TestSoldOutHerdWritesNothing: once a sale of a sku answered sold out,
// a herd of buyers after it sends no write to the store, whatever the
// strategy; every one of them is answered by a read, and two reads (one
// find of the item each) answer them all: the first buyer's, held until
// the others have joined the next.
func TestSoldOutHerdWritesNothing(t *testing.T) {
	s, writes, finds, written := countingStore(t)
	ctx := t.Context()
	const herd = 40
	for _, c := range shortcutStrategies(t, s, newLockServices(t)) {
		t.Run(c.st.Name(), func(t *testing.T) {
			sku := "herd-" + c.st.Name()
			mustPut(t, s, sku, 1)
			if _, err := c.st.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); err != nil {
				t.Fatalf("the last unit: %v", err)
			}
			if _, err := c.st.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); !errors.Is(err, inventory.ErrSoldOut) {
				t.Fatalf("after the last unit: %v; want sold out", err)
			}
			waitQuiet(t, s, sku, writes, c.raw)
			before, findsBefore := writes.Load(), finds.Load()
			_, _, readsBefore := c.obs.counts()
			w := c.st.(*soldOutShortcut)
			var once sync.Once
			w.afterRead = func(sku string) {
				once.Do(func() {
					for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
						if w.joined(sku) == herd-1 {
							return
						}
					}
				})
			}
			var wg sync.WaitGroup
			errs := make([]error, herd)
			for i := range herd {
				wg.Go(func() {
					_, errs[i] = c.st.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1})
				})
			}
			wg.Wait()
			for i, err := range errs {
				if !errors.Is(err, inventory.ErrSoldOut) {
					t.Errorf("buyer %d: %v; want sold out", i, err)
				}
			}
			byRead, byStrategy, reads := c.obs.counts()
			reads -= readsBefore
			t.Logf("%d buyers: %d writes, %d finds, %d sold outs by read, %d by the strategy, %d reads", herd, writes.Load()-before, finds.Load()-findsBefore, byRead, byStrategy, reads)
			if n := writes.Load() - before; n != 0 {
				t.Errorf("%d buyers after the last unit cost %d store writes; want 0: %v", herd, n, written(before))
			}
			if byRead != herd || byStrategy != 1 {
				t.Errorf("sold outs: %d by read, %d by the strategy; want %d and 1", byRead, byStrategy, herd)
			}
			if reads != 2 {
				t.Errorf("%d reads answered %d buyers; want 2: the first one's, and the next, which all the others joined", reads, herd)
			}
			if n := finds.Load() - findsBefore; n > int64(reads) {
				t.Errorf("%d buyers cost %d finds of the items; want at most one a read, %d", herd, n, reads)
			}
		})
	}
}

// soldOutOnce sells sku's last units through c and has it answer sold out
// twice, the second time from the shortcut's read: sku is marked.
func soldOutOnce(t *testing.T, c shortcutCase, sku string) {
	t.Helper()
	ctx := t.Context()
	for {
		_, err := c.st.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1})
		if errors.Is(err, inventory.ErrSoldOut) {
			break
		}
		if err != nil {
			t.Fatalf("selling %s out: %v", sku, err)
		}
	}
	before, _, _ := c.obs.counts()
	if _, err := c.st.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("%s after selling out: %v; want sold out", sku, err)
	}
	if after, _, _ := c.obs.counts(); after != before+1 {
		t.Fatalf("%s: the sold out after a sold out was not the shortcut's (%d by read, want %d)", sku, after, before+1)
	}
}

// TestSoldOutSeesOtherReplica: a PUT and a restock through another
// replica (a Store of its own on the same database) make the units of a
// sku this replica marked sold out sellable at once: the next sale sells,
// no false sold out.
func TestSoldOutSeesOtherReplica(t *testing.T) {
	s := testStore(t)
	other := replicaStore(t, s, StoreOptions{Replica: "other"})
	ctx := t.Context()
	for _, c := range shortcutStrategies(t, s, newLockServices(t)) {
		t.Run(c.st.Name(), func(t *testing.T) {
			sku := "seen-" + c.st.Name()
			mustPut(t, s, sku, 1)
			soldOutOnce(t, c, sku)
			mustPut(t, other, sku, 1)
			if _, err := c.st.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); err != nil {
				t.Fatalf("after another replica's PUT of 1: %v", err)
			}
			soldOutOnce(t, c, sku)
			if _, _, err := other.Restock(ctx, sku, "restock-"+c.st.Name(), 2); err != nil {
				t.Fatal(err)
			}
			if _, err := c.st.Decrement(ctx, inventory.Request{SKU: sku, Qty: 2}); err != nil {
				t.Fatalf("2 units after another replica's restock of 2: %v", err)
			}
			idle(c.raw)
		})
	}
}

// TestSoldOutExpiredHold: on a sku marked sold out while another
// replica's hold held its last unit, the unit is sellable as soon as the
// hold has expired by the store's clock, by the strategies that sell
// expired holds' units.
func TestSoldOutExpiredHold(t *testing.T) {
	s := testStore(t)
	other := replicaStore(t, s, StoreOptions{Replica: "other"})
	ctx := t.Context()
	var cases []shortcutCase
	for _, c := range shortcutStrategies(t, s, newLockServices(t)) {
		if in, _ := strategy.Lookup(c.st.Name()); in.Holds {
			cases = append(cases, c)
		}
	}
	if len(cases) == 0 {
		t.Fatal("no strategy takes part in holds")
	}
	for _, c := range cases {
		sku := "held-" + c.st.Name()
		mustPut(t, s, sku, 1)
		if _, err := NewAtomic(other).Hold(ctx, inventory.HoldRequest{SKU: sku, Qty: 1, TTL: inventory.MinHoldTTL}); err != nil {
			t.Fatal(err)
		}
		soldOutOnce(t, c, sku)
	}
	// The holds' time to live passes on this replica's estimate of the
	// store's clock (no goroutine of s runs now; the next one starts
	// after this write).
	s.now = skewed(2 * inventory.MinHoldTTL)
	for _, c := range cases {
		sku := "held-" + c.st.Name()
		if _, err := c.st.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); err != nil {
			t.Errorf("%s: the unit of an expired hold on a sku marked sold out: %v", c.st.Name(), err)
		}
	}
}

// TestSoldOutSplitSKU: a sku marked sold out that another replica then
// puts split across buckets sells at once (the read counts the buckets,
// where the item's own stock is 0); sold out again, its buckets merged,
// the herd after it writes nothing.
func TestSoldOutSplitSKU(t *testing.T) {
	s, writes := writeCountedStore(t)
	other := replicaStore(t, s, StoreOptions{Replica: "other"})
	ctx := t.Context()
	for _, c := range shortcutStrategies(t, s, newLockServices(t)) {
		t.Run(c.st.Name(), func(t *testing.T) {
			sku := "split-" + c.st.Name()
			mustPut(t, s, sku, 1)
			soldOutOnce(t, c, sku)
			if _, err := other.PutSplit(ctx, sku, 8, 4); err != nil {
				t.Fatal(err)
			}
			if it := mustGet(t, s, sku); it.Stock != 0 {
				t.Fatalf("the item's own stock is %d after a split put; want 0", it.Stock)
			}
			if _, err := c.st.Decrement(ctx, inventory.Request{SKU: sku, Qty: 3}); err != nil {
				t.Fatalf("3 units of 8 split across buckets, on a sku marked sold out: %v", err)
			}
			soldOutOnce(t, c, sku)
			waitQuiet(t, s, sku, writes, c.raw)
			before := writes.Load()
			for range 5 {
				if _, err := c.st.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); !errors.Is(err, inventory.ErrSoldOut) {
					t.Fatalf("after selling the split sku out: %v", err)
				}
			}
			if n := writes.Load() - before; n != 0 {
				t.Errorf("5 buyers after the split sku sold out cost %d writes; want 0", n)
			}
		})
	}
}

// TestSoldOutShortcutFallback: a strategy the shortcut cannot read (an
// unsafe one, one of another package) is returned as it is; one that
// reads itself (inventory.SellableReader) gets it.
func TestSoldOutShortcutFallback(t *testing.T) {
	s := testStore(t)
	if st := NewUnsafe(s, 0); newSoldOutShortcut(st, s, nil) != inventory.Strategy(st) {
		t.Error("unsafe got the shortcut")
	}
	foreign := foreignStrategy{NewAtomic(s)}
	if newSoldOutShortcut(foreign, s, nil) != inventory.Strategy(foreign) {
		t.Error("a strategy of another package, with no Sellable, got the shortcut")
	}
	reader := &readerStrategy{foreignStrategy: foreign}
	w := newSoldOutShortcut(reader, s, nil)
	if w == inventory.Strategy(reader) {
		t.Fatal("a SellableReader got no shortcut")
	}
	mustPut(t, s, "fb", 0)
	for range 2 {
		if _, err := w.Decrement(t.Context(), inventory.Request{SKU: "fb", Qty: 1}); !errors.Is(err, inventory.ErrSoldOut) {
			t.Fatalf("%v; want sold out", err)
		}
	}
	if reader.reads.Load() != 1 {
		t.Errorf("Sellable read %d times for the second sale; want 1", reader.reads.Load())
	}
}

// foreignStrategy stands for a strategy of another package: this package
// does not know how to read it.
type foreignStrategy struct{ inventory.Strategy }

func (foreignStrategy) Name() string { return "foreign" }

type readerStrategy struct {
	foreignStrategy
	reads atomic.Int64
}

func (r *readerStrategy) Sellable(ctx context.Context, sku string) (int64, error) {
	r.reads.Add(1)
	it, err := r.Strategy.(*Atomic).store.Snapshot(ctx, sku)
	return it.Stock, err
}

// TestSoldOutNoFalseSoldOut: rounds of a sku sold out and marked, then
// restocked by k units through another replica, then k buyers at once,
// all sent after the restock returned: the stock covers every one of them
// whatever the order, so none may hear sold out (a lock strategy's or
// optimistic's contention may refuse one otherwise, which sells nothing).
func TestSoldOutNoFalseSoldOut(t *testing.T) {
	s := testStore(t)
	other := replicaStore(t, s, StoreOptions{Replica: "other"})
	ctx := t.Context()
	const k, rounds = 8, 3
	for _, c := range shortcutStrategies(t, s, newLockServices(t)) {
		t.Run(c.st.Name(), func(t *testing.T) {
			sku := "race-" + c.st.Name()
			mustPut(t, s, sku, 1)
			for round := range rounds {
				soldOutOnce(t, c, sku)
				if _, _, err := other.Restock(ctx, sku, fmt.Sprintf("r%d", round), k); err != nil {
					t.Fatal(err)
				}
				errs := make([]error, k)
				var wg sync.WaitGroup
				for i := range k {
					wg.Go(func() {
						_, errs[i] = c.st.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1})
					})
				}
				wg.Wait()
				for i, err := range errs {
					if errors.Is(err, inventory.ErrSoldOut) {
						t.Errorf("round %d, buyer %d of %d after a restock of %d: %v", round, i, k, k, err)
					}
				}
			}
			idle(c.raw)
		})
	}
}

// TestSoldOutJoinsNextRead: a sale that arrives while a read of its sku
// is in flight waits for the next read, sent after it arrived, never
// for the one in flight, which may have read the store before the sale
// began: here that read found the sku sold out, then another replica
// restocked it, then the sale arrived: it sells.
func TestSoldOutJoinsNextRead(t *testing.T) {
	s := testStore(t)
	other := replicaStore(t, s, StoreOptions{Replica: "other"})
	ctx := t.Context()
	obs := &soldOutTally{}
	w := newSoldOutShortcut(NewAtomic(s), s, obs).(*soldOutShortcut)
	const sku = "next-read"
	mustPut(t, s, sku, 0)
	if _, err := w.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("%v; want sold out", err)
	}
	read, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	w.afterRead = func(string) {
		once.Do(func() {
			close(read)
			<-release
		})
	}
	first := decrementAsync(ctx, w, inventory.Request{SKU: sku, Qty: 1})
	<-read // the first read found 0, and is held before its sale hears of it
	if _, _, err := other.Restock(ctx, sku, "after-the-read", 1); err != nil {
		t.Fatal(err)
	}
	second := decrementAsync(ctx, w, inventory.Request{SKU: sku, Qty: 1})
	time.Sleep(50 * time.Millisecond) // the second sale joins
	close(release)
	if out := <-first; !errors.Is(out.err, inventory.ErrSoldOut) {
		t.Errorf("the sale whose read found 0: %v; want sold out", out.err)
	}
	if out := <-second; out.err != nil {
		t.Errorf("the sale that arrived after the restock: %v; want sold", out.err)
	}
}

// joined returns how many sales wait for the next read of sku (not sent
// yet).
func (w *soldOutShortcut) joined(sku string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if st := w.skus[sku]; st != nil && st.next != nil {
		return st.next.sales
	}
	return 0
}

// TestSoldOutKeyed: buyers with an Idempotency-Key each (DecrementOnce)
// after the last unit cost no write either: the shortcut answers them
// before their key is reserved. A retry of the sale that took the last
// unit still hears its sale, and the key of a buyer who heard sold out
// sells once another replica restocked.
func TestSoldOutKeyed(t *testing.T) {
	s, writes, _, written := countingStore(t)
	other := replicaStore(t, s, StoreOptions{Replica: "other"})
	ctx := t.Context()
	const herd = 20
	for _, c := range shortcutStrategies(t, s, newLockServices(t)) {
		t.Run(c.st.Name(), func(t *testing.T) {
			sku := "keyed-" + c.st.Name()
			once := func(key string) (inventory.Sale, bool, error) {
				return s.DecrementOnce(ctx, c.st, inventory.Request{SKU: sku, Qty: 1, Key: key}, "")
			}
			mustPut(t, s, sku, 1)
			first, _, err := once("last-unit")
			if err != nil {
				t.Fatalf("the last unit: %v", err)
			}
			if _, _, err := once("late"); !errors.Is(err, inventory.ErrSoldOut) {
				t.Fatalf("after the last unit: %v; want sold out", err)
			}
			waitQuiet(t, s, sku, writes, c.raw)
			before := writes.Load()
			var wg sync.WaitGroup
			errs := make([]error, herd)
			for i := range herd {
				wg.Go(func() { _, _, errs[i] = once(fmt.Sprintf("buyer-%d", i)) })
			}
			wg.Wait()
			for i, err := range errs {
				if !errors.Is(err, inventory.ErrSoldOut) {
					t.Errorf("buyer %d: %v; want sold out", i, err)
				}
			}
			if n := writes.Load() - before; n != 0 {
				t.Errorf("%d keyed buyers after the last unit cost %d store writes; want 0: %v", herd, n, written(before))
			}
			if sale, replayed, err := once("last-unit"); err != nil || !replayed || sale.OrderID != first.OrderID {
				t.Errorf("a retry of the sale of the last unit: %+v, replayed %v, %v; want its sale", sale, replayed, err)
			}
			if _, _, err := other.Restock(ctx, sku, "keyed-restock", 1); err != nil {
				t.Fatal(err)
			}
			if _, _, err := once("late"); err != nil {
				t.Errorf("the key that heard sold out, after another replica's restock: %v", err)
			}
			idle(c.raw)
		})
	}
}
