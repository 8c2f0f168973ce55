package mongostore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// BenchmarkKeyedDecrementRetained measures keyed decrements (atomic, on 100
// items, 8 at once, each with an Idempotency-Key of its own) on a store that
// already holds 0, 10,000 or 100,000 retained idempotency keys and ledger
// orders, with a recovery pass (RecoverPending and RecoverKeys) every
// 500 ms beside them, as the replicas run it. A decrement's cost, and a
// pass's, must not grow with what the store retains: it reports each
// decrement's p50 and p99 and the slowest recovery pass.
//
//	go test -run '^$' -bench KeyedDecrementRetained -benchtime 3000x ./pkg/inventory/mongostore/
func BenchmarkKeyedDecrementRetained(b *testing.B) {
	for _, retained := range []int{0, 10_000, 100_000} {
		b.Run(fmt.Sprintf("retained=%d", retained), func(b *testing.B) {
			s := testStore(b)
			ctx := b.Context()
			retain(b, s, retained)
			const skus = 100
			for i := range skus {
				if _, err := s.Put(ctx, fmt.Sprintf("sku-%d", i), 1<<40); err != nil {
					b.Fatal(err)
				}
			}

			stop := make(chan struct{})
			var slowest atomic.Int64
			recovered := make(chan struct{})
			go func() {
				defer close(recovered)
				t := time.NewTicker(500 * time.Millisecond)
				defer t.Stop()
				for {
					select {
					case <-stop:
						return
					case <-t.C:
					}
					start := time.Now()
					if _, err := s.RecoverPending(ctx, time.Second); err != nil {
						b.Error(err)
					}
					if _, err := s.RecoverKeys(ctx); err != nil {
						b.Error(err)
					}
					if d := int64(time.Since(start)); d > slowest.Load() {
						slowest.Store(d)
					}
				}
			}()

			st := NewAtomic(s)
			var next atomic.Int64
			took := make([]time.Duration, b.N)
			var wg sync.WaitGroup
			b.ResetTimer()
			for range 8 {
				wg.Go(func() {
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						req := inventory.Request{SKU: fmt.Sprintf("sku-%d", i%skus), Qty: 1, Key: fmt.Sprintf("bench-%d", i)}
						start := time.Now()
						if _, _, err := s.DecrementOnce(ctx, st, req, ""); err != nil {
							b.Error(err)
							return
						}
						took[i] = time.Since(start)
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			close(stop)
			<-recovered

			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(slowest.Load())/1e6, "slowest-recovery-ms")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decrements/s")
		})
	}
}

// retain fills the store with n settled idempotency keys and n ledger
// orders, as a day of keyed sales leaves them.
func retain(b *testing.B, s *Store, n int) {
	b.Helper()
	ctx := context.WithoutCancel(b.Context())
	at := time.Now().UTC().Truncate(time.Millisecond)
	const batch = 1000
	for start := 0; start < n; start += batch {
		var keys, orders []any
		for i := start; i < min(start+batch, n); i++ {
			id := newOrderID()
			sku := fmt.Sprintf("old-%d", i%100)
			key := fmt.Sprintf("old-%d", i)
			keys = append(keys, bson.D{{Key: "_id", Value: sku + "/" + key}, {Key: "sku", Value: sku}, {Key: "key", Value: key},
				{Key: "request", Value: "x"}, {Key: "order_id", Value: id}, {Key: "at", Value: at}, {Key: "done", Value: true}})
			orders = append(orders, inventory.Order{ID: id, SKU: sku, Qty: 1, Replica: "old", Strategy: "atomic", At: at, Key: key})
		}
		if _, err := s.keys.InsertMany(ctx, keys); err != nil {
			b.Fatal(err)
		}
		if _, err := s.orders.InsertMany(ctx, orders); err != nil {
			b.Fatal(err)
		}
	}
}
