package mongostore

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// BenchmarkStoreWriteCeiling measures the store's own rate of
// single-document conditional updates, the kind every sale is made of:
// {_id, stock: {$gte: 1}} with {$inc: {stock: -1, version: 1}}, by 1, 8,
// 16 and 64 writers at once, all on one hot item (docs=1) or each writer on
// items of its own (docs=many). 64 writers on items of their own are more
// than the embedded store's gate lets into FerretDB at once (30), and as
// many as FerretDB's pool has connections: the case that deadlocked it
// before the gate's bound (docs/embedded-store.md#a-herd-cannot-wedge-the-store). Writes to one document wait for each other on
// any MongoDB; writes to different documents need not, and on the embedded
// store's per-document gate they do not (docs/embedded-store.md). A
// strategy's sales per second cannot exceed the rate of its store writes
// divided by the store writes of one sale (see docs/results.md). Against
// MONGO_URI it measures that server.
//
//	go test -run '^$' -bench StoreWriteCeiling -benchtime 3s -count 3 ./pkg/inventory/mongostore/
func BenchmarkStoreWriteCeiling(b *testing.B) {
	for _, docs := range []string{"1", "many"} {
		for _, writers := range []int{1, 8, 16, 64} {
			b.Run(fmt.Sprintf("docs=%s/writers=%d", docs, writers), func(b *testing.B) {
				benchmarkWrites(b, writers, docs == "many")
			})
		}
	}
}

func benchmarkWrites(b *testing.B, writers int, many bool) {
	s := testStore(b)
	ctx := b.Context()
	skus := []string{"ceiling"}
	if many {
		skus = skus[:0]
		for w := range writers {
			skus = append(skus, fmt.Sprintf("ceiling-%d", w))
		}
	}
	for _, sku := range skus {
		if _, err := s.Put(ctx, sku, 1<<40); err != nil {
			b.Fatal(err)
		}
	}
	update := bson.D{{Key: "$inc", Value: bson.D{{Key: "stock", Value: int64(-1)}, {Key: "version", Value: int64(1)}}}}
	var left atomic.Int64
	left.Store(int64(b.N))
	var failed atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for w := range writers {
		filter := bson.D{{Key: "_id", Value: skus[w%len(skus)]}, {Key: "stock", Value: bson.D{{Key: "$gte", Value: int64(1)}}}}
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
}
