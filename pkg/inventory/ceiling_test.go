package inventory

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// BenchmarkStoreWriteCeiling measures the store's own rate of
// single-document conditional updates, the kind every sale is made of: on
// one hot item, {_id, stock: {$gte: 1}} with {$inc: {stock: -1, version: 1}},
// by 1 and by 8 writers at once. On the embedded store every write goes
// through the gate, which serialises them, so this is the ceiling of the
// store writes per second that all strategies share; a strategy's sales
// per second cannot exceed it divided by the store writes of one sale
// (see docs/results.md). Against MONGO_URI it measures that server.
//
//	go test -run '^$' -bench StoreWriteCeiling -benchtime 3s ./pkg/inventory/
func BenchmarkStoreWriteCeiling(b *testing.B) {
	for _, writers := range []int{1, 8} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			s := testStore(b)
			ctx := b.Context()
			const sku = "ceiling"
			if _, err := s.Put(ctx, sku, 1<<40); err != nil {
				b.Fatal(err)
			}
			filter := bson.D{{Key: "_id", Value: sku}, {Key: "stock", Value: bson.D{{Key: "$gte", Value: int64(1)}}}}
			update := bson.D{{Key: "$inc", Value: bson.D{{Key: "stock", Value: int64(-1)}, {Key: "version", Value: int64(1)}}}}
			var left atomic.Int64
			left.Store(int64(b.N))
			var failed atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for range writers {
				wg.Go(func() {
					for left.Add(-1) >= 0 {
						res, err := s.items.UpdateOne(ctx, filter, update)
						if err != nil || res.MatchedCount != 1 {
							failed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d of %d updates failed or matched nothing", n, b.N)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
		})
	}
}
