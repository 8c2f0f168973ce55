package mongostore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// TestSplitSKUInterleavings: on one sku that the buckets strategy split,
// with a hold the store's clock has expired, the buckets strategy's merges
// (sales larger than any bucket) and recovery's give-ups and compaction
// run at the same time as another safe strategy's sales, keyed and not,
// holds and restocks, for each safe strategy as Build makes it. Whatever
// the interleaving:
//   - no unit is made or lost: available + held + sold (each order once)
//     is the stock put plus the restocks applied;
//   - every sale answered is in the ledger, and no Idempotency-Key sold
//     twice;
//   - then, on the sku split again with an expired hold beside its
//     buckets, the strategy sells every sellable unit in one sale, and
//     its next answer is sold out with nothing sellable left: no false
//     sold out.
func TestSplitSKUInterleavings(t *testing.T) {
	base := testStore(t)
	lockers := map[string]*lock.Locker{}
	for _, svc := range strategy.LockServices() {
		lockers[svc.Name] = localLocker(t)
	}
	for _, in := range strategy.All() {
		if !in.Safe || in.Name == strategy.Buckets {
			continue
		}
		t.Run(in.Name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s := replicaStore(t, base, StoreOptions{Replica: "r-" + in.Name, AbandonAfter: time.Millisecond})
			built, err := Build(in, Deps{Store: s, Lockers: lockers, Fencing: true, Buckets: 4, NATS: testNATS(t),
				RedisStock: RedisStockOptions{Client: testRedis(t), KeyPrefix: RedisStockKeyPrefix(s.items.Database().Name())}})
			if err != nil {
				t.Fatal(err)
			}
			if built.Queued != nil {
				built.Queued.runFor(t)
			}
			st := built.Strategy
			sku := "ilv-" + in.Name + "-" + newOrderID()[:16]
			const put = 40
			mustPut(t, s, sku, put)
			pastHold(t, s, sku, 3)
			bk := newBuckets(t, s, 4)
			if _, err := bk.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); err != nil {
				t.Fatal(err)
			}
			if v, err := s.read(ctx, s.items, sku); err != nil || v.item.Split == nil {
				t.Fatalf("the first buckets sale did not split %q: %+v, %v", sku, v, err)
			}

			var (
				mu       sync.Mutex
				answered []inventory.Sale
				restock  int64 // the units the applied restocks added
				wg       sync.WaitGroup
			)
			keep := func(sale inventory.Sale, err error, what string, ok ...error) {
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					answered = append(answered, sale)
					return
				}
				for _, e := range append(ok, inventory.ErrSoldOut) {
					if errors.Is(err, e) {
						return
					}
				}
				t.Errorf("%s: %v", what, err)
			}
			// The buckets strategy: merges (10 units: more than any bucket
			// holds) and single sales that split the sku again.
			wg.Go(func() {
				for i := range 8 {
					qty := int64(10)
					if i%2 == 1 {
						qty = 1
					}
					sale, err := bk.Decrement(ctx, inventory.Request{SKU: sku, Qty: qty})
					keep(sale, err, "buckets sale", inventory.ErrConflict)
				}
			})
			// Recovery: attempts left behind, given up and compacted.
			wg.Go(func() {
				for range 3 {
					if _, err := leftAttempts(ctx, s, sku, 3); err != nil {
						t.Error(err)
						return
					}
					// A pass that fails leaves its work to the next one
					// (recovery's contract); what it must never do is
					// break the books, which the checks below read. On a
					// loaded machine the embedded store can fail a pass
					// (FerretDB: "i/o timeout" on its PostgreSQL socket).
					if _, err := s.RecoverKeys(ctx); err != nil {
						t.Logf("recovery pass failed, left to the next: %v", err)
					}
				}
			})
			// The strategy's sales, keyed and not.
			wg.Go(func() {
				for i := range 16 {
					req := inventory.Request{SKU: sku, Qty: 1}
					// A lock holder whose item another writer changed after
					// its read is refused, having changed nothing (ErrStale).
					if i%2 == 0 {
						sale, err := st.Decrement(ctx, req)
						keep(sale, err, in.Name+" sale", inventory.ErrConflict, inventory.ErrStale)
						continue
					}
					req.Key = fmt.Sprintf("ilv-%d", i)
					sale, _, err := s.DecrementOnce(ctx, st, req, in.Name)
					// A keyed attempt open longer than AbandonAfter may be
					// given up by the recovery running beside it.
					keep(sale, err, in.Name+" keyed sale", inventory.ErrConflict, inventory.ErrStale, inventory.ErrAbandoned)
				}
			})
			// Its holds, where it takes part in them: a hold takes from the
			// item's own stock, which a split leaves at 0.
			if built.Holder != nil {
				wg.Go(func() {
					for range 4 {
						_, err := built.Holder.Hold(ctx, inventory.HoldRequest{SKU: sku, Qty: 1, TTL: time.Minute})
						if err != nil && !errors.Is(err, inventory.ErrSoldOut) && !errors.Is(err, inventory.ErrHoldsUnsupported) &&
							!errors.Is(err, inventory.ErrConflict) && !errors.Is(err, inventory.ErrStale) {
							t.Errorf("%s hold: %v", in.Name, err)
						}
					}
				})
			}
			// Restocks, in and out.
			wg.Go(func() {
				for i, qty := range []int64{2, -1, 3, -2, 1} {
					_, _, err := s.Restock(ctx, sku, fmt.Sprintf("ilv-restock-%d", i), qty)
					switch {
					case err == nil:
						mu.Lock()
						restock += qty
						mu.Unlock()
					case !errors.Is(err, inventory.ErrInsufficient) && !errors.Is(err, inventory.ErrConflict):
						t.Errorf("restock %+d: %v", qty, err)
					}
				}
			})
			wg.Wait()

			// Then a split sku whose stock is its buckets' and an expired
			// hold's: a merge (a sale of more than the buckets hold) ends
			// the split, a restock and a hold that expired go to the item,
			// and a buckets sale splits it again. The strategy sells all
			// of it in one sale, then says sold out, with nothing left.
			if _, err := bk.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1_000_000}); !errors.Is(err, inventory.ErrSoldOut) {
				t.Fatalf("a merge of more than the sku holds: %v, want sold out", err)
			}
			if _, _, err := s.Restock(ctx, sku, "ilv-final", 12); err != nil {
				t.Fatal(err)
			}
			restock += 12
			pastHold(t, s, sku, 2)
			if _, err := bk.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); err != nil {
				t.Fatal(err)
			}
			if v, err := s.read(ctx, s.items, sku); err != nil || v.item.Split == nil {
				t.Fatalf("the buckets sale did not split %q again: %+v, %v", sku, v, err)
			}
			left, err := s.sellable(ctx, sku)
			if err != nil {
				t.Fatal(err)
			}
			sale, err := st.Decrement(ctx, inventory.Request{SKU: sku, Qty: left})
			keep(sale, err, fmt.Sprintf("%s sale of the %d units left", in.Name, left))
			if err != nil {
				t.Errorf("%s: a sale of the %d sellable units (in buckets and an expired hold): %v", in.Name, left, err)
			}
			if _, err := st.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); !errors.Is(err, inventory.ErrSoldOut) {
				t.Errorf("%s: a sale after the last unit: %v, want sold out", in.Name, err)
			} else if left, err := s.sellable(ctx, sku); err != nil || left != 0 {
				t.Errorf("%s answered sold out with %d sellable (%v)", in.Name, left, err)
			}
			if _, _, _, err := unitsAddUp(ctx, s, sku, put+restock); err != nil {
				t.Error(err)
			}
			checkLedger(t, s, sku, answered)
		})
	}
}

// TestBuiltSellsExpiredHolds: every strategy as Build makes it sells the
// units of a hold the store's clock expired, on a sku whose other units
// are gone: a Holder in its own sale write, any other once its returning
// layer has returned them.
func TestBuiltSellsExpiredHolds(t *testing.T) {
	s := testStore(t)
	lockers := map[string]*lock.Locker{}
	for _, svc := range strategy.LockServices() {
		lockers[svc.Name] = localLocker(t)
	}
	deps := Deps{Store: s, Lockers: lockers, Fencing: true, NATS: testNATS(t),
		RedisStock: RedisStockOptions{Client: testRedis(t), KeyPrefix: RedisStockKeyPrefix(s.items.Database().Name())}}
	for _, in := range strategy.All() {
		t.Run(in.Name, func(t *testing.T) {
			built, err := Build(in, deps)
			if err != nil {
				t.Fatal(err)
			}
			if built.Queued != nil {
				built.Queued.runFor(t)
			}
			sku := "expired-" + in.Name + "-" + newOrderID()[:16]
			mustPut(t, s, sku, 2)
			pastHold(t, s, sku, 2)
			if sale, err := built.Decrement(t.Context(), inventory.Request{SKU: sku, Qty: 2}); err != nil {
				t.Fatalf("a sale of the 2 units of an expired hold: %+v, %v", sale, err)
			}
			if _, err := built.Decrement(t.Context(), inventory.Request{SKU: sku, Qty: 1}); !errors.Is(err, inventory.ErrSoldOut) {
				t.Fatalf("a sale after the last unit: %v, want sold out", err)
			}
		})
	}
}

// checkLedger fails t unless every sale of answered is in sku's ledger
// (or pending in its documents) and no Idempotency-Key sold twice.
func checkLedger(t *testing.T, s *Store, sku string, answered []inventory.Sale) {
	t.Helper()
	ctx := context.WithoutCancel(t.Context())
	in := map[string]bool{}
	byKey := map[string]int{}
	q := inventory.OrdersQuery{SKU: sku, Limit: inventory.MaxOrdersLimit}
	for {
		page, err := s.Orders(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Orders {
			in[o.ID] = true
			if o.Key != "" {
				byKey[o.Key]++
			}
		}
		if page.Next == "" {
			break
		}
		q.After = page.Next
	}
	it, err := s.Snapshot(ctx, sku)
	if err != nil {
		t.Fatal(err)
	}
	for id, o := range it.Pending {
		if !in[id] && o.Key != "" {
			byKey[o.Key]++
		}
		in[id] = true
	}
	for _, sale := range answered {
		if !in[sale.OrderID] {
			t.Errorf("sale %+v was answered, and its order is in neither the ledger nor the item", sale)
		}
	}
	for key, n := range byKey {
		if n > 1 {
			t.Errorf("key %q sold %d times", key, n)
		}
	}
}
