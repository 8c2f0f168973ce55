package mongostore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stocklock/stocklock/pkg/inventory"
)

// BenchmarkHotSKU sells one hot sku from two replicas' Stores, with 8 and
// 32 requests in flight, by atomic, by batched and by buckets (on the sku
// put split, K = DefaultBuckets), with no HTTP in the way: what the
// strategy gets out of the store. It reports sales/s and
// the stock writes of the item per sale, counted by the item's version,
// which each stock write bumps once. The unpends do not bump it: atomic
// writes the item twice that (each sale's unpend is a write of its own),
// batched hardly more (its unpends ride on its next stock write).
//
//	go test -run '^$' -bench HotSKU -benchtime 2000x -count 3 ./pkg/inventory/mongostore/
func BenchmarkHotSKU(b *testing.B) {
	for _, name := range []string{"atomic", "batched", "buckets"} {
		for _, inFlight := range []int{8, 32} {
			b.Run(fmt.Sprintf("%s/in-flight=%d", name, inFlight), func(b *testing.B) {
				a := testStore(b)
				r := replicaStore(b, a, StoreOptions{Replica: "b"})
				var sts []inventory.Strategy
				for _, s := range []*Store{a, r} {
					switch name {
					case "atomic":
						sts = append(sts, NewAtomic(s))
					case "batched":
						sts = append(sts, NewBatched(s, 0))
					default:
						bk, err := NewBuckets(s, 0)
						if err != nil {
							b.Fatal(err)
						}
						sts = append(sts, bk)
					}
				}
				var start inventory.Item
				if name == "buckets" {
					var err error
					if start, err = a.PutSplit(b.Context(), "hot", 1<<40, DefaultBuckets); err != nil {
						b.Fatal(err)
					}
				} else {
					start = mustPut(b, a, "hot", 1<<40)
				}
				var left, failed atomic.Int64
				left.Store(int64(b.N))
				var wg sync.WaitGroup
				b.ResetTimer()
				for w := range inFlight {
					st := sts[w%2]
					wg.Go(func() {
						for left.Add(-1) >= 0 {
							if _, err := st.Decrement(context.Background(), inventory.Request{SKU: "hot", Qty: 1}); err != nil {
								failed.Add(1)
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				idle(sts...)
				if n := failed.Load(); n > 0 {
					b.Fatalf("%d of %d decrements failed", n, b.N)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sales/s")
				if name == "buckets" {
					return // its stock writes go to the buckets, not the item
				}
				end := mustGet(b, a, "hot")
				b.ReportMetric(float64(end.Version-start.Version)/float64(b.N), "stock-writes/sale")
			})
		}
	}
}
