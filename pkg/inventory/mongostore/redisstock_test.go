package mongostore

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/internal/testskip"
	"github.com/stocklock/stocklock/pkg/inventory"
)

// testRedis returns a client of the test's own to the shared Redis.
func testRedis(t testing.TB) *redis.Client {
	t.Helper()
	return redisAt(t, redisAddr)
}

func redisAt(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// redisStockOn returns redis-stock on s, its keys under the prefix of s's
// database, so that every Store of one test shares the copy.
func redisStockOn(t testing.TB, s *Store, c redis.UniversalClient, opts RedisStockOptions) *RedisStock {
	t.Helper()
	opts.Client = c
	opts.KeyPrefix = RedisStockKeyPrefix(s.items.Database().Name())
	r, err := NewRedisStock(s, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tally counts the outcomes of decrements.
type tally struct {
	mu      sync.Mutex
	sold    []inventory.Sale
	soldOut int
	errs    []error
}

func (c *tally) add(sale inventory.Sale, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil:
		c.sold = append(c.sold, sale)
	case errors.Is(err, inventory.ErrSoldOut):
		c.soldOut++
	default:
		c.errs = append(c.errs, err)
	}
}

// checkRedisBooks checks that the item holds stock, the ledger holds exactly
// the sales acknowledged (each once), and Redis has nothing in flight.
func checkRedisBooks(t *testing.T, s *Store, rs *RedisStock, sku string, stock int64, sold []inventory.Sale) {
	t.Helper()
	if it := mustGet(t, s, sku); it.Stock != stock || len(it.Pending) != 0 {
		t.Errorf("item: stock %d, %d pending; want %d, none", it.Stock, len(it.Pending), stock)
	}
	orders := map[string]bool{}
	for _, o := range allOrders(t, s, sku, time.Time{}) {
		orders[o.ID] = true
	}
	if len(orders) != len(sold) {
		t.Errorf("ledger: %d orders, want the %d sales acknowledged", len(orders), len(sold))
	}
	for _, sale := range sold {
		if !orders[sale.OrderID] {
			t.Errorf("acknowledged sale %s is not in the ledger", sale.OrderID)
		}
	}
	st, err := rs.State(t.Context(), sku)
	if err != nil {
		t.Fatal(err)
	}
	if st.Inflight != 0 || st.OldestSale >= 0 {
		t.Errorf("Redis: %+v, want nothing in flight", st)
	}
}

// TestRedisStockSellsExactlyTheStock: two replicas (Stores with clients of
// their own) race 100 decrements for 40 units, loading the copy into
// Redis at once: 40 sold, 60 sold out, the item and the ledger exact, and
// every remaining stock answered once.
func TestRedisStockSellsExactlyTheStock(t *testing.T) {
	a := testStore(t)
	b := replicaStore(t, a, StoreOptions{Replica: "b"})
	ra, rb := redisStockOn(t, a, testRedis(t), RedisStockOptions{}), redisStockOn(t, b, testRedis(t), RedisStockOptions{})
	const sku, stock = "race", 40
	mustPut(t, a, sku, stock)
	var c tally
	var wg sync.WaitGroup
	for i := range 100 {
		st := []*RedisStock{ra, rb}[i%2]
		wg.Go(func() { c.add(st.Decrement(t.Context(), inventory.Request{SKU: sku, Qty: 1})) })
	}
	wg.Wait()
	if len(c.sold) != stock || c.soldOut != 60 || len(c.errs) != 0 {
		t.Fatalf("sold %d, sold out %d, errors %v; want %d, 60, none", len(c.sold), c.soldOut, c.errs, stock)
	}
	remaining := map[int64]bool{}
	for _, s := range c.sold {
		remaining[s.Remaining] = true
	}
	if len(remaining) != stock {
		t.Errorf("%d distinct remaining stocks answered, want %d (0 to %d once each)", len(remaining), stock, stock-1)
	}
	checkRedisBooks(t, a, ra, sku, 0, c.sold)
}

// TestRedisStockIdempotencyKey: one key sent to two replicas sells once;
// the second answer replays the first sale.
func TestRedisStockIdempotencyKey(t *testing.T) {
	a := testStore(t)
	b := replicaStore(t, a, StoreOptions{Replica: "b"})
	ra, rb := redisStockOn(t, a, testRedis(t), RedisStockOptions{}), redisStockOn(t, b, testRedis(t), RedisStockOptions{})
	mustPut(t, a, "k", 10)
	req := inventory.Request{SKU: "k", Qty: 2, Key: "K1"}
	first, replayed, err := a.DecrementOnce(t.Context(), ra, req, "")
	if err != nil || replayed {
		t.Fatalf("first: %+v, replayed %v, %v", first, replayed, err)
	}
	again, replayed, err := b.DecrementOnce(t.Context(), rb, req, "")
	if err != nil || !replayed || again.OrderID != first.OrderID {
		t.Fatalf("retry on b: %+v, replayed %v, %v; want %s replayed", again, replayed, err, first.OrderID)
	}
	checkRedisBooks(t, a, ra, "k", 8, []inventory.Sale{first})
}

// stopAfterTake returns a hook that stops the sale of sku right after its
// Lua take, as a replica killed there would, until release is closed.
func stopAfterTake(sku string) (hook func(inventory.Order), reached, release chan struct{}) {
	reached, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	return func(o inventory.Order) {
		if o.SKU != sku {
			return
		}
		once.Do(func() {
			close(reached)
			<-release
		})
	}, reached, release
}

// TestRedisStockReplicaDiesAfterTake: replica a stops between its Lua
// take and its batch write (killed, or paused). Its unit is taken in
// Redis only: b sells 4 of 5, and its fifth request finds the unit in
// flight and waits for it, until the sale in flight is older than b's
// grace: then b reloads the sku and sells the fifth. When a wakes, its
// write, of the old epoch, is refused, and it hears sold out: 5 sold, 5
// orders. With a grace of an hour, b's fifth request waits until its
// deadline (sold out would be a lie while MongoDB holds the unit), and
// b's periodic recovery with a short grace reloads the sku.
func TestRedisStockReplicaDiesAfterTake(t *testing.T) {
	for _, c := range []struct {
		name    string
		grace   time.Duration
		recover bool
	}{{"grace", 200 * time.Millisecond, false}, {"recovery", time.Hour, true}} {
		t.Run(c.name, func(t *testing.T) {
			a := testStore(t)
			b := replicaStore(t, a, StoreOptions{Replica: "b"})
			hook, reached, release := stopAfterTake("dies")
			ra := redisStockOn(t, a, testRedis(t), RedisStockOptions{AfterTake: hook})
			rb := redisStockOn(t, b, testRedis(t), RedisStockOptions{Grace: c.grace})
			mustPut(t, a, "dies", 5)
			first := make(chan error, 1)
			go func() {
				_, err := ra.Decrement(context.Background(), inventory.Request{SKU: "dies", Qty: 1})
				first <- err
			}()
			<-reached
			var sold tally
			for range 4 {
				sold.add(rb.Decrement(t.Context(), inventory.Request{SKU: "dies", Qty: 1}))
			}
			if c.recover {
				ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
				_, err := rb.Decrement(ctx, inventory.Request{SKU: "dies", Qty: 1})
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("fifth sale before recovery: %v, want to wait for the unit in flight until its deadline", err)
				}
				recov := redisStockOn(t, b, testRedis(t), RedisStockOptions{Grace: time.Nanosecond})
				if n, err := recov.Recover(t.Context()); err != nil || n != 1 {
					t.Fatalf("Recover = %d, %v; want the sku reloaded", n, err)
				}
			}
			sold.add(rb.Decrement(t.Context(), inventory.Request{SKU: "dies", Qty: 1}))
			close(release)
			if err := <-first; !errors.Is(err, inventory.ErrSoldOut) {
				t.Errorf("a, woken: %v, want sold out", err)
			}
			if len(sold.sold) != 5 || len(sold.errs) != 0 {
				t.Fatalf("sold %d, errors %v; want 5 and none", len(sold.sold), sold.errs)
			}
			checkRedisBooks(t, a, ra, "dies", 0, sold.sold)
		})
	}
}

// TestRedisStockAbandonedKey: a keyed request of a stops after its Lua
// take; b's recovery gives its attempt up (b abandons after 1 ms); the
// key's retry sells on b; a wakes, and the item refuses its write
// (aborted.<order id>): one sale, and a's unit back in Redis.
func TestRedisStockAbandonedKey(t *testing.T) {
	a := testStore(t)
	b := replicaStore(t, a, StoreOptions{Replica: "b", AbandonAfter: time.Millisecond})
	hook, reached, release := stopAfterTake("ab")
	ra := redisStockOn(t, a, testRedis(t), RedisStockOptions{AfterTake: hook})
	rb := redisStockOn(t, b, testRedis(t), RedisStockOptions{})
	mustPut(t, a, "ab", 10)
	req := inventory.Request{SKU: "ab", Qty: 1, Key: "K"}
	first := make(chan error, 1)
	go func() {
		_, _, err := a.DecrementOnce(context.Background(), ra, req, "")
		first <- err
	}()
	<-reached
	rec, err := b.RecoverKeys(t.Context())
	if err != nil || rec.Abandoned != 1 {
		t.Fatalf("b's RecoverKeys = %+v, %v; want a's attempt abandoned", rec, err)
	}
	retry, replayed, err := b.DecrementOnce(t.Context(), rb, req, "")
	if err != nil || replayed {
		t.Fatalf("retry on b: %+v, replayed %v, %v; want a sale", retry, replayed, err)
	}
	close(release)
	if err := <-first; !errors.Is(err, inventory.ErrAbandoned) {
		t.Errorf("a, woken: %v, want ErrAbandoned", err)
	}
	checkRedisBooks(t, a, ra, "ab", 9, []inventory.Sale{retry})
	if st, _ := ra.State(t.Context(), "ab"); st.Stock != 9 {
		t.Errorf("Redis stock %d, want 9: a's unit given back", st.Stock)
	}
}

// sellUntilSoldOut decrements sku by 1 on sts in turn from workers goroutines until
// each hears sold out, retrying what changed nothing (a Redis that is
// restarting, a batch of an old epoch refused too often).
func sellUntilSoldOut(t *testing.T, c *tally, sku string, workers int, sts ...*RedisStock) {
	t.Helper()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				sale, err := sts[(w+i)%len(sts)].Decrement(t.Context(), inventory.Request{SKU: sku, Qty: 1})
				switch {
				case errors.Is(err, inventory.ErrStoreUnavailable), errors.Is(err, inventory.ErrStale):
					time.Sleep(10 * time.Millisecond)
					continue
				case errors.Is(err, inventory.ErrSoldOut):
					c.add(sale, err)
					return
				}
				c.add(sale, err)
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
}

// soldAtLeast waits until c counts n sales, or the sale ended.
func (c *tally) soldAtLeast(n int, ended <-chan struct{}) bool {
	for {
		c.mu.Lock()
		got := len(c.sold)
		c.mu.Unlock()
		if got >= n {
			return true
		}
		select {
		case <-ended:
			return false
		case <-time.After(time.Millisecond):
		}
	}
}

// sellThroughFaults sells stock units of sku on a and b from 6 workers
// until each hears sold out, striking fault after every every sales, times
// times, and checks the books: exactly the stock sold, every
// acknowledged sale in the ledger.
func sellThroughFaults(t *testing.T, s *Store, ra, rb *RedisStock, sku string, stock int64, every, times int, fault func() error) {
	t.Helper()
	mustPut(t, s, sku, stock)
	var c tally
	ended, struck := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		defer func() { struck <- n }()
		for n < times && c.soldAtLeast(every*(n+1), ended) {
			if err := fault(); err != nil {
				t.Error(err)
				return
			}
			n++
		}
	}()
	sellUntilSoldOut(t, &c, sku, 6, ra, rb)
	close(ended)
	if n := <-struck; n != times {
		t.Errorf("the fault struck %d times during the sale, want %d", n, times)
	}
	if len(c.sold) != int(stock) || len(c.errs) != 0 {
		t.Fatalf("sold %d, errors %v; want %d, none", len(c.sold), c.errs, stock)
	}
	checkRedisBooks(t, s, ra, sku, 0, c.sold)
}

// TestRedisStockRedisLosesData: the copy in Redis is deleted (as a
// restart without persistence or FLUSHALL would) after every 10 sales
// while two replicas sell 60 units: every acknowledged sale is in the
// ledger, and exactly the stock is sold.
func TestRedisStockRedisLosesData(t *testing.T) {
	a := testStore(t)
	b := replicaStore(t, a, StoreOptions{Replica: "b"})
	ca := testRedis(t)
	ra, rb := redisStockOn(t, a, ca, RedisStockOptions{}), redisStockOn(t, b, testRedis(t), RedisStockOptions{})
	sellThroughFaults(t, a, ra, rb, "loss", 60, 10, 5, func() error { return ca.Del(t.Context(), ra.keys("loss")...).Err() })
}

// TestRedisStockRedisRestarts: a private redis-server, restarted without
// persistence after 20 and 40 sales while two replicas sell 60: the same
// books.
func TestRedisStockRedisRestarts(t *testing.T) {
	t.Setenv("REDIS_ADDR", "")
	srv, err := devstore.StartRedis(t.Context(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	if srv.Kind != devstore.KindRedisServer {
		t.Skipf("needs redis-server to restart, have %s", srv.Kind)
	}
	a := testStore(t)
	b := replicaStore(t, a, StoreOptions{Replica: "b"})
	ra, rb := redisStockOn(t, a, redisAt(t, srv.Addr), RedisStockOptions{}), redisStockOn(t, b, redisAt(t, srv.Addr), RedisStockOptions{})
	sellThroughFaults(t, a, ra, rb, "restart", 60, 20, 2, func() error { return srv.Restart(context.Background()) })
}

// TestRedisStockPutAndRestock: a PUT while Redis holds the copy replaces
// it (the epoch moves); a restock that adds to the item behind Redis's
// back is found when Redis says sold out.
func TestRedisStockPutAndRestock(t *testing.T) {
	s := testStore(t)
	rs := redisStockOn(t, s, testRedis(t), RedisStockOptions{})
	mustPut(t, s, "put", 10)
	var sold []inventory.Sale
	sell := func(n int) {
		t.Helper()
		for range n {
			sale, err := rs.Decrement(t.Context(), inventory.Request{SKU: "put", Qty: 1})
			if err != nil {
				t.Fatalf("sale %d: %v", len(sold)+1, err)
			}
			sold = append(sold, sale)
		}
	}
	sell(3)
	mustPut(t, s, "put", 5)
	sell(5)
	if _, err := rs.Decrement(t.Context(), inventory.Request{SKU: "put", Qty: 1}); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("after 5 of the PUT's 5: %v, want sold out", err)
	}
	if _, err := s.items.UpdateOne(t.Context(), bson.D{{Key: "_id", Value: "put"}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "stock", Value: int64(2)}}}}); err != nil {
		t.Fatal(err)
	}
	sell(2)
	checkRedisBooks(t, s, rs, "put", 0, sold)
}

// TestRedisStockAckAfterRedisSellsTwice demonstrates the unsafe rule:
// acknowledged from Redis alone, 5 sales are not yet in MongoDB when
// Redis loses the copy; the reload from MongoDB sells those 5 units
// again, and once the writes behind land the item's stock is -5.
func TestRedisStockAckAfterRedisSellsTwice(t *testing.T) {
	testskip.Long(t, "a demonstration of the unsafe rule that waits out a 2 s write-behind flush")
	s := testStore(t)
	c := testRedis(t)
	rs := redisStockOn(t, s, c, RedisStockOptions{AckAfterRedis: true, Flush: 2 * time.Second})
	mustPut(t, s, "twice", 10)
	acked := 0
	for range 5 {
		if _, err := rs.Decrement(t.Context(), inventory.Request{SKU: "twice", Qty: 1}); err != nil {
			t.Fatal(err)
		}
		acked++
	}
	if err := c.Del(t.Context(), rs.keys("twice")...).Err(); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := rs.Decrement(t.Context(), inventory.Request{SKU: "twice", Qty: 1})
		if errors.Is(err, inventory.ErrSoldOut) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		acked++
	}
	deadline := time.Now().Add(30 * time.Second)
	for mustGet(t, s, "twice").Stock != 10-int64(acked) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if it := mustGet(t, s, "twice"); acked != 15 || it.Stock != -5 {
		t.Errorf("acknowledged %d of 10 units, item stock %d; want 15 and -5 (5 sold twice)", acked, it.Stock)
	}
}
