package mongostore

import (
	"errors"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// docBytes returns the size of the items document id (an item or a
// bucket), as stored, and its aborted entries.
func docBytes(t testing.TB, s *Store, id string) (int, int) {
	t.Helper()
	raw, err := s.items.FindOne(t.Context(), bson.D{{Key: "_id", Value: id}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Aborted map[string]time.Time `bson:"aborted"`
	}
	if err := bson.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	return len(raw), len(d.Aborted)
}

// TestBucketGiveUpsKeepTheBucketsSmall: on a sku split across buckets,
// every attempt given up fences its order id in each bucket as well as
// in the item, and no document of the sku may grow with them. After 20
// give-ups in two recovery passes no bucket holds an aborted entry, and
// each is the size it had but for aborted_through; yet every given-up
// order is still refused by every bucket (a take sent straight to it, as
// a replica with the split cached sends it), by the buckets strategy and
// by a split-aware atomic. (AbandonAfter is a millisecond, so that the
// fences are old enough to move at once.)
func TestBucketGiveUpsKeepTheBucketsSmall(t *testing.T) {
	s := replicaStore(t, testStore(t), StoreOptions{Replica: "r", AbandonAfter: time.Millisecond})
	ctx := t.Context()
	const sku, k = "bk-giveups", 4
	mustPut(t, s, sku, 1000)
	bk := newBuckets(t, s, k)
	if _, err := bk.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); err != nil {
		t.Fatal(err) // splits the sku; bk caches the split
	}
	v, err := s.read(ctx, s.items, sku)
	if err != nil || v.item.Split == nil || len(v.buckets) != k {
		t.Fatalf("after the first sale: %+v, %v; want the sku split in %d buckets", v, err, k)
	}
	gen := v.item.Split.Gen
	before := make([]int, k)
	for i := range k {
		before[i], _ = docBytes(t, s, bucketID(sku, i))
	}

	var gone []string
	for range 2 {
		gone = append(gone, leaveAttempts(t, s, sku, 10)...)
		got, err := s.RecoverKeys(ctx)
		if err != nil || got.Abandoned != 10 {
			t.Fatalf("recovery: %+v, %v; want 10 attempts given up", got, err)
		}
	}
	for i := range k {
		size, entries := docBytes(t, s, bucketID(sku, i))
		if entries != 0 || size > before[i]+128 {
			t.Errorf("bucket %d after %d give-ups: %d aborted entries, %d bytes (%d before); want none, and at most 128 bytes more",
				i, len(gone), entries, size, before[i])
		}
	}
	if _, entries := docBytes(t, s, sku); entries != 0 {
		t.Errorf("the item holds %d aborted entries after the give-ups; want none", entries)
	}

	// Late writes of given-up orders, the first and the last.
	aware, err := newSplitAware(NewAtomic(s), s, k)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{gone[0], gone[len(gone)-1]} {
		req := inventory.Request{SKU: sku, Qty: 1, OrderID: id, Key: "late"}
		for i := range k {
			o := s.newOrder(req, "buckets", 0)
			if sale, took, err := bk.take(ctx, o, bucketID(sku, i), gen); took || err != nil {
				t.Errorf("late take of given-up order %s from bucket %d: took %v, %+v, %v; want refused", id, i, took, sale, err)
			}
		}
		for _, st := range []inventory.Strategy{bk, aware} {
			if sale, err := st.Decrement(ctx, req); !errors.Is(err, inventory.ErrAbandoned) {
				t.Errorf("%s: late write of given-up order %s: %+v, %v; want inventory.ErrAbandoned", st.Name(), id, sale, err)
			}
		}
	}
	if it, n := mustSnapshot(t, s, sku), mustCount(t, s, sku); it.Stock != 999 || n != 1 {
		t.Fatalf("stock %d, orders %d: want 999 and 1, the first sale only", it.Stock, n)
	}
}
