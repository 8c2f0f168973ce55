package mongostore

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/stocklock/stocklock/pkg/inventory"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// countedStore returns a Store of its own database through a client that
// counts the find commands it sends on the items collection.
func countedStore(t *testing.T) (*Store, *atomic.Int64) {
	t.Helper()
	finds := new(atomic.Int64)
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if coll, ok := e.Command.Lookup("find").StringValueOK(); ok && e.CommandName == "find" && coll == "items" {
			finds.Add(1)
		}
	}}
	c, err := mongo.Connect(options.Client().ApplyURI(mongoURI).SetMonitor(mon))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	s, err := NewStore(c.Database(testDB(t).Name()), StoreOptions{Replica: "counted", Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureIndexes(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s, finds
}

// TestSplitAwareSoldOutReadsOnce: a split-aware strategy whose own read of
// the item found it not split and short answers that sold out with no
// read of its own (one find of the item, the strategy's), as the plain
// *inventory.SoldOutError; and once buckets has split the sku, the same
// strategies still sell from its buckets.
func TestSplitAwareSoldOutReadsOnce(t *testing.T) {
	s, finds := countedStore(t)
	ctx := t.Context()
	locks := newLockServices(t)
	sts := append(safeStrategies(t, s, locks), NewBatched(s, 0))
	const sku = "sa-short"
	mustPut(t, s, sku, 1)
	for _, st := range sts {
		w, err := newSplitAware(st, s, 4)
		if err != nil {
			t.Fatal(err)
		}
		before := finds.Load()
		_, err = w.Decrement(ctx, inventory.Request{SKU: sku, Qty: 2})
		n := finds.Load() - before
		if so, ok := err.(*inventory.SoldOutError); !ok || so.Stock != 1 {
			t.Errorf("%s: 2 units of 1: %v (%T); want *inventory.SoldOutError with stock 1", st.Name(), err, err)
		}
		if n != 1 {
			t.Errorf("%s: a sold out of an item not split cost %d finds of the items; want 1, the strategy's own read", st.Name(), n)
		}
	}

	// Split: 39 units in 4 buckets, the item's own stock 0.
	const split = "sa-split"
	mustPut(t, s, split, 40)
	if _, err := newBuckets(t, s, 4).Decrement(ctx, inventory.Request{SKU: split, Qty: 1}); err != nil {
		t.Fatal(err)
	}
	var sales []inventory.Sale
	for _, st := range sts {
		w, err := newSplitAware(st, s, 4)
		if err != nil {
			t.Fatal(err)
		}
		sale, err := w.Decrement(ctx, inventory.Request{SKU: split, Qty: 1})
		if err != nil {
			t.Errorf("%s: one unit of a split sku holding 39: %v", st.Name(), err)
			continue
		}
		sales = append(sales, sale)
	}
	idle(sts...)
	if it, n := mustSnapshot(t, s, split), mustCount(t, s, split); it.Stock != 39-int64(len(sales)) || n != 1+int64(len(sales)) {
		t.Errorf("stock %d, orders %d after %d sales of the split sku: want %d and %d", it.Stock, n, len(sales), 39-len(sales), 1+len(sales))
	}
}
