package mongostore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/stocklock/stocklock/pkg/inventory"
)

// reloads records the reloads an observer is told of.
type reloads struct {
	mu      sync.Mutex
	reasons []string
}

func (o *reloads) RedisStockReloaded(_, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reasons = append(o.reasons, reason)
}

// since returns the reasons told after the first n.
func (o *reloads) since(n int) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.reasons[n:])
}

// TestRedisStockReloadReasons walks one sku through every reason redis-stock
// reloads Redis for, against the real Redis and store, and checks that the
// observer hears each reload once, with its reason: the first sale; the copy
// deleted from Redis; a PUT down, found when the item refuses a batch; a
// restock, found behind a sold-out answer of Redis; and a replica stopped
// between its Lua take and its batch write, reconciled by another's
// recovery.
func TestRedisStockReloadReasons(t *testing.T) {
	a := testStore(t)
	b := replicaStore(t, a, StoreOptions{Replica: "b"})
	obs := &reloads{}
	c := testRedis(t)
	hook, reached, release := stopAfterTake("obs")
	stopNext := false
	var stopMu sync.Mutex
	ra := redisStockOn(t, a, c, RedisStockOptions{Observer: obs, AfterTake: func(o inventory.Order) {
		stopMu.Lock()
		stop := stopNext
		stopMu.Unlock()
		if stop {
			hook(o)
		}
	}})
	rb := redisStockOn(t, b, testRedis(t), RedisStockOptions{Observer: obs, Grace: time.Nanosecond})
	const sku = "obs"
	mustPut(t, a, sku, 10)
	sell := func(rs *RedisStock) error {
		_, err := rs.Decrement(t.Context(), inventory.Request{SKU: sku, Qty: 1})
		return err
	}
	step := func(what string, want []string, do func() error) {
		t.Helper()
		n := len(obs.since(0))
		if err := do(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := obs.since(n); !slices.Equal(got, want) {
			t.Errorf("%s: the observer heard reloads %q, want %q", what, got, want)
		}
	}
	step("the first sale", []string{reloadFirst}, func() error { return sell(ra) })
	step("a sale after the copy was deleted from Redis", []string{reloadRedisLost}, func() error {
		if err := c.Del(t.Context(), ra.keys(sku)...).Err(); err != nil {
			return err
		}
		return sell(ra)
	})
	step("a sale after a PUT down to 1 unit", nil, func() error {
		mustPut(t, a, sku, 1)
		return sell(ra) // Redis holds 8, the item 1: the batch of 1 lands
	})
	step("a sale of a unit only Redis still holds", []string{reloadRefused}, func() error {
		if err := sell(ra); !errors.Is(err, inventory.ErrSoldOut) {
			return errors.New("want sold out after the refused batch and the reload")
		}
		return nil
	})
	step("a sale after a restock behind Redis's back", []string{reloadItemAhead}, func() error {
		if _, err := a.items.UpdateOne(t.Context(), bson.D{{Key: "_id", Value: sku}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "stock", Value: int64(2)}}}}); err != nil {
			return err
		}
		return sell(ra)
	})
	step("another replica's recovery after a take never written", []string{reloadDeadTake}, func() error {
		stopMu.Lock()
		stopNext = true
		stopMu.Unlock()
		first := make(chan error, 1)
		go func() {
			_, err := ra.Decrement(context.Background(), inventory.Request{SKU: sku, Qty: 1})
			first <- err
		}()
		<-reached
		// Recovery reloads a sale older than the grace (1 ns) by Redis's
		// clock, which counts milliseconds: wait until it is 1 ms old.
		for {
			st, err := rb.State(t.Context(), sku)
			if err != nil {
				return err
			}
			if st.OldestSale > 0 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		n, err := rb.Recover(t.Context())
		if err != nil || n != 1 {
			return errors.Join(err, errors.New("want the sku reloaded once"))
		}
		close(release)
		// Its write, of the old epoch, is refused; the sale is taken again
		// from the reloaded copy (Redis is already ahead: no reload).
		return <-first
	})
	if it := mustGet(t, a, sku); it.Stock != 0 {
		t.Errorf("item stock %d, want 0", it.Stock)
	}
}
