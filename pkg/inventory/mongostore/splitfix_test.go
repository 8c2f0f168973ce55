package mongostore

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/pkg/strategy"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// interposer is a command monitor that runs a test's code at exact
// commands of one client: before(name, cmd) as a command is sent, and
// after(name, cmd) once it has succeeded, in the goroutine that sent it,
// which waits for them. With them a test pauses one replica at a chosen
// command and runs another replica's writes there: the interleaving is
// forced, not left to timing.
type interposer struct {
	before, after func(name string, cmd bson.Raw)
	sent          sync.Map // request id -> the command, for after
}

func (p *interposer) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{
		Started: func(_ context.Context, e *event.CommandStartedEvent) {
			cmd := bson.Raw(slices.Clone(e.Command))
			p.sent.Store(e.RequestID, cmd)
			if p.before != nil {
				p.before(e.CommandName, cmd)
			}
		},
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
			cmd, ok := p.sent.LoadAndDelete(e.RequestID)
			if ok && p.after != nil {
				p.after(e.CommandName, cmd.(bson.Raw))
			}
		},
		Failed: func(_ context.Context, e *event.CommandFailedEvent) { p.sent.Delete(e.RequestID) },
	}
}

// interposedStore returns another replica's Store on s's database, through
// a client of its own that p watches.
func interposedStore(t *testing.T, s *Store, opts StoreOptions, p *interposer) *Store {
	t.Helper()
	c, err := mongo.Connect(options.Client().ApplyURI(mongoURI).SetMonitor(p.monitor()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
	}
	r, err := NewStore(c.Database(s.items.Database().Name()), opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// on reports whether cmd, a command named name, is a command named want
// on collection coll.
func on(name string, cmd bson.Raw, want, coll string) bool {
	c, ok := cmd.Lookup(want).StringValueOK()
	return name == want && ok && c == coll
}

// firstAfter returns an after hook that runs fn once, at the first success
// of a command named want on coll once armed is set.
func firstAfter(armed *atomic.Bool, want, coll string, fn func()) func(string, bson.Raw) {
	var once sync.Once
	return func(name string, cmd bson.Raw) {
		if armed.Load() && on(name, cmd, want, coll) {
			once.Do(fn)
		}
	}
}

// splitSKU puts stock units of sku and has st, a buckets strategy, sell
// one of them, which splits the sku: stock-1 units, all in its buckets.
func splitSKU(t *testing.T, s *Store, st *Buckets, sku string, stock int64) {
	t.Helper()
	mustPut(t, s, sku, stock)
	if _, err := st.Decrement(t.Context(), inventory.Request{SKU: sku, Qty: 1}); err != nil {
		t.Fatal(err)
	}
	if v, err := s.read(t.Context(), s.items, sku); err != nil || v.item.Split == nil {
		t.Fatalf("%q after a buckets sale: %+v, %v; want it split", sku, v, err)
	}
}

// TestNoFalseSoldOutAcrossMerge: atomic's conditional update misses on a
// split sku (the item's own stock is 0); before atomic reads the item to
// say why, a buckets sale on another replica merges the sku back into the
// item, which then holds 13 units. The read finds the item not split and
// holding enough: that is no sold out, and the sale must go through. A
// hold's create has the same gap, between its read of the item and its
// look at the split (holdShort).
func TestNoFalseSoldOutAcrossMerge(t *testing.T) {
	ctx := t.Context()
	b := testStore(t)
	bb := newBuckets(t, b, 4)
	var armed atomic.Bool
	p := &interposer{}
	a := interposedStore(t, b, StoreOptions{Replica: "a"}, p)
	merge := func(sku string) func() {
		return func() {
			// 40 - 1 - 26 = 13: more than any bucket holds, so a merge.
			if _, err := bb.Decrement(ctx, inventory.Request{SKU: sku, Qty: 26}); err != nil {
				t.Errorf("the merging sale: %v", err)
			}
			if v, err := b.read(ctx, b.items, sku); err != nil || v.item.Split != nil || v.item.Stock != 13 {
				t.Errorf("after the merge: %+v, %v; want 13 units in the item, not split", v, err)
			}
		}
	}

	t.Run("atomic", func(t *testing.T) {
		const sku = "fso-atomic"
		splitSKU(t, b, bb, sku, 40)
		armed.Store(true)
		defer armed.Store(false)
		// Right after atomic's update matched nothing.
		p.after = firstAfter(&armed, "findAndModify", ItemsCollection, merge(sku))
		w, err := newSplitAware(NewAtomic(a), a, 4)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); err != nil {
			t.Fatalf("1 unit of a sku holding 13: %v", err)
		}
		if it := mustSnapshot(t, b, sku); it.Stock != 12 {
			t.Errorf("stock %d after the sale; want 12", it.Stock)
		}
	})

	t.Run("hold", func(t *testing.T) {
		const sku = "fso-hold"
		splitSKU(t, b, bb, sku, 40)
		armed.Store(true)
		defer armed.Store(false)
		// Right after the create's read of the item that found it short
		// (the split's 0), before it looks at the split.
		p.after = firstAfter(&armed, "find", ItemsCollection, merge(sku))
		h, err := NewAtomic(a).Hold(ctx, inventory.HoldRequest{SKU: sku, Qty: 1, TTL: time.Minute})
		if err != nil {
			t.Fatalf("a hold of 1 unit of a sku holding 13: %v", err)
		}
		if h.State != inventory.HoldHeld {
			t.Errorf("hold %+v; want held", h)
		}
	})
}

// TestRestockOfASplitSKU: a restock judges and answers the sku's stock,
// its buckets' included, not the item's own (0 once split).
func TestRestockOfASplitSKU(t *testing.T) {
	ctx := t.Context()
	s := testStore(t)
	bk := newBuckets(t, s, 4)

	splitSKU(t, s, bk, "rs-less", 17) // GET says 16
	it, _, err := s.Restock(ctx, "rs-less", "minus", -1)
	if err != nil {
		t.Fatalf("restock -1 of a sku holding 16: %v", err)
	}
	if it.Stock != 15 || mustSnapshot(t, s, "rs-less").Stock != 15 {
		t.Errorf("restock -1 of 16 answered stock %d (GET %d); want 15", it.Stock, mustSnapshot(t, s, "rs-less").Stock)
	}
	if again, replayed, err := s.Restock(ctx, "rs-less", "minus", -1); err != nil || !replayed || again.Stock != 15 {
		t.Errorf("replay of the restock: stock %d, replayed %v, %v; want 15 replayed", again.Stock, replayed, err)
	}

	splitSKU(t, s, bk, "rs-more", 17)
	it, _, err = s.Restock(ctx, "rs-more", "plus", 1)
	if err != nil {
		t.Fatalf("restock +1 of a sku holding 16: %v", err)
	}
	if it.Stock != 17 {
		t.Errorf("restock +1 of 16 answered stock %d; want 17", it.Stock)
	}
	if got := mustSnapshot(t, s, "rs-more").Stock; got != 17 {
		t.Errorf("GET after restock +1 of 16: %d; want 17", got)
	}

	var short *inventory.InsufficientError
	if _, _, err := s.Restock(ctx, "rs-more", "too-much", -18); !errors.As(err, &short) || short.Stock != 17 {
		t.Errorf("restock -18 of 17: %v; want *inventory.InsufficientError of stock 17", err)
	}
	if n := mustCount(t, s, "rs-more"); n != 1 {
		t.Errorf("orders %d; want 1", n)
	}
}

// TestSplitSaleCountsExpiredHolds: on a split sku with 1 unit in its
// bucket and 1 under a hold that has expired by the store's clock, a sale
// of 2 units must sell, as it does on an item that is not split, with every
// strategy that takes holds (atomic, mongo-lease) and with buckets: the
// merge counts the expired hold's units, and returns them in its write.
func TestSplitSaleCountsExpiredHolds(t *testing.T) {
	ctx := t.Context()
	s := testStore(t)
	locks := newLockServices(t)
	lease, err := NewLocked(s, LockedConfig{Name: strategy.MongoLease, Locker: locks[strategy.MongoLease], Fencing: true})
	if err != nil {
		t.Fatal(err)
	}
	bk := newBuckets(t, s, 1)
	for _, st := range []inventory.Strategy{NewAtomic(s), lease, bk} {
		t.Run(st.Name(), func(t *testing.T) {
			sku := "exp-" + st.Name()
			mustPut(t, s, sku, 3)
			h := pastHold(t, s, sku, 1) // 2 in stock, 1 held, expired
			if _, err := s.PutSplit(ctx, sku, 2, 1); err != nil {
				t.Fatal(err) // the 2 in one bucket
			}
			if _, err := bk.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); err != nil {
				t.Fatal(err) // 1 left in the bucket
			}
			if v, err := s.read(ctx, s.items, sku); err != nil || v.item.Split == nil || v.total() != 1 || v.item.Held != 1 {
				t.Fatalf("before the sale: %+v, %v; want split, 1 unit in the bucket and 1 held", v, err)
			}
			w, err := newSplitAware(st, s, 1)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Decrement(ctx, inventory.Request{SKU: sku, Qty: 2}); err != nil {
				t.Fatalf("2 units: 1 in the bucket, 1 under an expired hold: %v", err)
			}
			if stock, held, sold := checkUnits(t, s, sku, 3); stock != 0 || held != 0 || sold != 3 {
				t.Errorf("available %d held %d sold %d; want 0 0 3", stock, held, sold)
			}
			if got, err := s.GetHold(ctx, sku, h.ID); err != nil || got.State != inventory.HoldExpired {
				t.Errorf("the hold after the sale: %v, %v; want expired", got.State, err)
			}
		})
	}
}

// TestKeyNotSoldTwiceAcrossCompaction: a keyed attempt X of replica a
// mints its order id, then pauses before it records its attempt (a replica
// paused there, or whose clock is behind by more than AbandonAfter: its
// ticket is older than the fences compacted). Meanwhile replica c gives up
// another attempt F, minted after X, and compacts F's fence: the item's
// aborted_through rises to F, over X, but the buckets' do not yet, in two
// ways: the compaction is held between its write of the item and the
// buckets' ("item first"), or the sku is split after the compaction read
// the item, so that it never writes the buckets ("split mid-pass"). Then
// a retry of X's key on c must not take the key over on the item's word
// alone while X can still land in a bucket: X is sold once, by one of them.
func TestKeyNotSoldTwiceAcrossCompaction(t *testing.T) {
	t.Run("item first", func(t *testing.T) { keyAcrossCompaction(t, false) })
	t.Run("split mid-pass", func(t *testing.T) { keyAcrossCompaction(t, true) })
}

func keyAcrossCompaction(t *testing.T, midPass bool) {
	ctx := t.Context()
	base := testStore(t)
	var armed atomic.Bool
	pa, pc := &interposer{}, &interposer{}
	a := interposedStore(t, base, StoreOptions{Replica: "a"}, pa)
	c := interposedStore(t, base, StoreOptions{Replica: "c", AbandonAfter: time.Millisecond}, pc)
	ba, bc := newBuckets(t, a, 4), newBuckets(t, c, 4)
	const sku = "key-compact"
	if midPass {
		mustPut(t, base, sku, 20) // split by a's first sale, below
	} else {
		splitSKU(t, a, ba, sku, 20) // 19 in 4 buckets; a caches the split
	}

	// a: X's ticket minted, its attempt's insert held.
	insertReached, insertRelease := make(chan struct{}), make(chan struct{})
	var insertOnce sync.Once
	pa.before = func(name string, cmd bson.Raw) {
		if armed.Load() && on(name, cmd, "insert", AttemptsCollection) {
			insertOnce.Do(func() { close(insertReached); <-insertRelease })
		}
	}
	// c: compaction held before its write of the first bucket (item
	// first) or of the item (split mid-pass).
	compactReached, compactRelease := make(chan struct{}), make(chan struct{})
	var compactOnce sync.Once
	pc.before = func(name string, cmd bson.Raw) {
		if !armed.Load() || !on(name, cmd, "update", ItemsCollection) {
			return
		}
		up := cmd.Lookup("updates", "0")
		id, _ := up.Document().Lookup("q", "_id").StringValueOK()
		if _, max := up.Document().Lookup("u").Document().Lookup("$max").DocumentOK(); max && (id == sku) == midPass {
			compactOnce.Do(func() { close(compactReached); <-compactRelease })
		}
	}
	armed.Store(true)

	req := inventory.Request{SKU: sku, Qty: 1, Key: "K"}
	h := hold(ba)
	type result struct {
		sale inventory.Sale
		err  error
	}
	first := make(chan result, 1)
	go func() {
		sale, _, err := a.DecrementOnce(context.Background(), h, req, "")
		first <- result{sale, err}
	}()
	<-insertReached
	time.Sleep(5 * time.Millisecond)
	gone := leaveAttempts(t, c, sku, 1)[0] // F, minted after X
	time.Sleep(5 * time.Millisecond)       // older than c's AbandonAfter
	recovered := make(chan error, 1)
	go func() {
		_, err := c.RecoverKeys(context.Background())
		recovered <- err
	}()
	<-compactReached
	if midPass {
		// The compaction read the item unsplit. a splits it now (its
		// buckets copy the item's fences as they are: F's, not yet
		// compacted), and caches the split.
		if _, err := ba.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); err != nil {
			t.Fatal(err)
		}
		close(compactRelease)
		if err := <-recovered; err != nil {
			t.Errorf("c's recovery: %v", err)
		}
	}
	if it := mustGet(t, base, sku); it.AbortedThrough < gone {
		t.Fatalf("the item's aborted_through %q; want F's %q: compacted", it.AbortedThrough, gone)
	}
	close(insertRelease)
	<-h.reached // X's attempt recorded and its key reserved, its take not sent

	retry, replayed, err := c.DecrementOnce(ctx, bc, req, "")
	if err != nil || replayed {
		t.Fatalf("retry of K on c: %+v, replayed %v, %v", retry, replayed, err)
	}
	close(h.release)
	r := <-first
	if !midPass {
		close(compactRelease)
		if err := <-recovered; err != nil {
			t.Errorf("c's recovery: %v", err)
		}
	}
	if r.err == nil && r.sale.OrderID != retry.OrderID {
		t.Errorf("K sold twice: %s by a, then %s by c", r.sale.OrderID, retry.OrderID)
	} else if r.err != nil && !errors.Is(r.err, inventory.ErrAbandoned) {
		t.Errorf("the first attempt: %v; want a sale or inventory.ErrAbandoned", r.err)
	}
	if it, n := mustSnapshot(t, base, sku), mustCount(t, base, sku); it.Stock != 18 || n != 2 {
		t.Errorf("stock %d, orders %d; want 18 and 2: the first sale, and K once", it.Stock, n)
	}
}
