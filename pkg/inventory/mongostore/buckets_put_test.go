package mongostore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"
)

// TestBucketsPutSplit: PutSplit leaves a sku split with every bucket
// written, so that sales never write the item (its version does not
// move): 40 units sell to the last from two replicas with no false sold
// out. A PutSplit of a split sku ends the old split, so that a replica
// with the old generation cached sells only from the new stock; and a
// stock under two units a bucket is put unsplit.
func TestBucketsPutSplit(t *testing.T) {
	a := testStore(t)
	b := replicaStore(t, a, StoreOptions{Replica: "b"})
	ctx := t.Context()
	const sku, k, stock = "bk-putsplit", 4, 40
	it, err := a.PutSplit(ctx, sku, stock, k)
	if err != nil || it.Stock != stock {
		t.Fatalf("PutSplit 40: %+v, %v", it, err)
	}
	v, err := a.read(ctx, a.items, sku)
	if err != nil {
		t.Fatal(err)
	}
	if v.item.Split == nil || len(v.buckets) != k {
		t.Fatalf("after PutSplit: item %+v; want split in %d buckets", v.item, k)
	}
	for i := range k {
		if st := v.state(i); st != bucketLive || v.buckets[i].Stock != stock/k {
			t.Errorf("bucket %d after PutSplit: state %d, stock %d; want live with %d", i, st, v.buckets[i].Stock, stock/k)
		}
	}
	itemVersion := v.item.Version

	ba, bb := newBuckets(t, a, k), newBuckets(t, b, k)
	half, errs := sellEach(alternate(stock/2, ba, bb), sku, 1)
	if after := mustGet(t, a, sku); after.Version != itemVersion {
		t.Errorf("item version %d → %d after %d of 40 sales: a sale wrote the item (split it)", itemVersion, after.Version, len(half))
	}
	rest, more := sellEach(alternate(stock/2, ba, bb), sku, 1)
	for _, err := range append(errs, more...) {
		t.Errorf("a request for one of the %d units left: %v", stock, err)
	}
	checkBooks(t, a, sku, stock, append(half, rest...))

	// Put again, split, on top of the old split; ba has its generation
	// cached.
	if _, err := ba.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); err == nil {
		t.Fatal("a sale of the 41st unit of 40")
	}
	const again = "bk-putsplit-again"
	if _, err := a.PutSplit(ctx, again, stock, k); err != nil {
		t.Fatal(err)
	}
	if _, err := ba.Decrement(ctx, inventory.Request{SKU: again, Qty: 1}); err != nil {
		t.Fatal(err) // ba caches the split
	}
	if it, err := b.PutSplit(ctx, again, 20, k); err != nil || it.Stock != 20 {
		t.Fatalf("PutSplit 20 of a split sku: %+v, %v", it, err)
	}
	if v, err := a.read(ctx, a.items, again); err != nil || v.item.Split == nil {
		t.Fatalf("after PutSplit 20 of a split sku: %+v, %v; want it split", v, err)
	} else {
		for i := range k {
			if st := v.state(i); st != bucketLive || v.buckets[i].Stock != 20/k {
				t.Errorf("bucket %d after PutSplit 20 of a split sku: state %d, stock %d; want live with %d", i, st, v.buckets[i].Stock, 20/k)
			}
		}
	}
	for range 3 {
		if _, err := ba.Decrement(ctx, inventory.Request{SKU: again, Qty: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if it := mustSnapshot(t, a, again); it.Stock != 17 {
		t.Fatalf("stock after PutSplit 20 and 3 sales: %d, want 17: a sale took from the stock the put replaced", it.Stock)
	}

	if _, err := a.PutSplit(ctx, again, 2*k-1, k); err != nil {
		t.Fatal(err)
	}
	if v, err := a.read(ctx, a.items, again); err != nil || v.item.Split != nil || v.total() != 2*k-1 {
		t.Fatalf("PutSplit of %d units in %d buckets: %+v, %v; want the item unsplit with them", 2*k-1, k, v, err)
	}
}

// BenchmarkFreshSKU is the start of a capacity step in-process: a fresh
// sku is put, then 32 one-unit requests arrive at once from two
// replicas' Stores, and their latencies are collected over b.N skus. It
// compares atomic, buckets splitting at its first sale (a read, the
// spread, K bucket writes), and buckets on a sku put split (PutSplit):
// the p50, p99 and slowest of those first requests.
//
//	go test -run '^$' -bench FreshSKU -benchtime 30x -count 1 ./pkg/inventory/mongostore/
func BenchmarkFreshSKU(b *testing.B) {
	const wave, k, stock = 32, DefaultBuckets, 10_000
	for _, name := range []string{"atomic", "buckets", "buckets-put-split"} {
		b.Run(name, func(b *testing.B) {
			a := testStore(b)
			r := replicaStore(b, a, StoreOptions{Replica: "b"})
			var lat []time.Duration
			var mu sync.Mutex
			b.ResetTimer()
			for n := range b.N {
				sku := fmt.Sprintf("fresh-%d", n)
				var sts []inventory.Strategy
				for _, s := range []*Store{a, r} {
					if name == "atomic" {
						sts = append(sts, NewAtomic(s))
						continue
					}
					bk, err := NewBuckets(s, k)
					if err != nil {
						b.Fatal(err)
					}
					sts = append(sts, bk)
				}
				var err error
				if name == "buckets-put-split" {
					_, err = a.PutSplit(b.Context(), sku, stock, k)
				} else {
					_, err = a.Put(b.Context(), sku, stock)
				}
				if err != nil {
					b.Fatal(err)
				}
				var wg sync.WaitGroup
				for w := range wave {
					st := sts[w%2]
					wg.Go(func() {
						start := time.Now()
						_, err := st.Decrement(context.Background(), inventory.Request{SKU: sku, Qty: 1})
						d := time.Since(start)
						if err != nil {
							b.Error(err)
						}
						mu.Lock()
						lat = append(lat, d)
						mu.Unlock()
					})
				}
				wg.Wait()
			}
			b.StopTimer()
			slices.Sort(lat)
			at := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000 }
			b.ReportMetric(at(0.5), "p50-ms")
			b.ReportMetric(at(0.99), "p99-ms")
			b.ReportMetric(at(1), "max-ms")
		})
	}
}
