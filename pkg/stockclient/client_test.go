package stockclient_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stocklock/stocklock/services/stock/server/servertest"

	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
	"github.com/stocklock/stocklock/pkg/stockclient"
	"github.com/stocklock/stocklock/services/stock/server"
)

var mongoURI, redisAddr, natsURL string

func TestMain(m *testing.M) {
	devstoretest.Main(m, devstoretest.SharedMongo|devstoretest.SharedRedis|devstoretest.SharedNATS, func(s devstoretest.Shared) {
		mongoURI, redisAddr, natsURL = s.MongoURI, s.RedisAddr, s.NATSURL
	})
}

const adminToken = "client-test-admin-token-0123"

// replica starts a real replica on the shared stores, in a database of its
// own, and returns its base URL.
func replica(t *testing.T, tweak func(*server.Config)) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	cfg := server.DefaultConfig()
	cfg.MongoURI, cfg.RedisAddr = mongoURI, redisAddr
	cfg.DB = "stockclient_test_" + hex.EncodeToString(b[:])
	cfg.Replica, cfg.AdminToken = "c1", adminToken
	cfg.LogFormat, cfg.LogLevel = "text", "warn"
	if tweak != nil {
		tweak(&cfg)
	}
	return servertest.Start(t, t.Context(), cfg, server.NewLogger(t.Output(), cfg))
}

func TestClient(t *testing.T) {
	base := replica(t, nil)
	ctx := t.Context()
	anon := stockclient.New(base, stockclient.WithTimeout(10*time.Second))
	c := stockclient.New(base, stockclient.WithAdminToken(adminToken))

	// Stock changes need the token: a typed 401.
	_, err := anon.PutItem(ctx, "c-1", 3)
	var e *stockclient.Error
	if !errors.Is(err, stockclient.ErrUnauthorized) || !errors.As(err, &e) || e.Status != http.StatusUnauthorized || e.Replica != "c1" {
		t.Fatalf("PUT without the token: %v; want a 401 unauthorized from c1", err)
	}
	if errors.Is(err, stockclient.ErrNotFound) {
		t.Fatal("an unauthorized error is also not_found")
	}
	it, err := c.PutItem(ctx, "c-1", 3)
	if err != nil || it.Stock != 3 || it.SKU != "c-1" {
		t.Fatalf("PutItem: %+v, %v", it, err)
	}
	// If-Match: the version read sets it; an older one is refused.
	if _, err := c.PutItem(ctx, "c-1", 2, stockclient.IfMatch(it.Version)); err != nil {
		t.Fatalf("PUT at the current version: %v", err)
	}
	if _, err := c.PutItem(ctx, "c-1", 3, stockclient.IfMatch(it.Version)); !errors.Is(err, stockclient.ErrVersionMismatch) {
		t.Fatalf("PUT at an old version: %v; want version_mismatch", err)
	}
	if _, err := c.GetItem(ctx, "nope"); !errors.Is(err, stockclient.ErrNotFound) {
		t.Fatalf("GetItem of an unknown sku: %v", err)
	}

	// A keyed decrement sells once however often it is sent.
	key := stockclient.NewIdempotencyKey()
	s1, err := c.Decrement(ctx, "c-1", 1, "atomic", stockclient.IdempotencyKey(key))
	if err != nil || s1.Replayed || s1.Remaining == nil || *s1.Remaining != 1 || s1.IdempotencyKey != key {
		t.Fatalf("first keyed decrement: %+v, %v", s1, err)
	}
	s2, err := c.At(base).Decrement(ctx, "c-1", 1, "atomic", stockclient.IdempotencyKey(key))
	if err != nil || !s2.Replayed || s2.OrderID != s1.OrderID {
		t.Fatalf("retry with the key: %+v, %v; want the replay of %s", s2, err, s1.OrderID)
	}
	if _, err := c.Decrement(ctx, "c-1", 2, "atomic", stockclient.IdempotencyKey(key)); !errors.Is(err, stockclient.ErrIdempotencyKeyReused) {
		t.Fatalf("the key with another qty: %v", err)
	}
	if _, err := c.Decrement(ctx, "c-1", 1, ""); err != nil {
		t.Fatalf("decrement with the default strategy: %v", err)
	}
	_, err = c.Decrement(ctx, "c-1", 1, "atomic")
	if !errors.Is(err, stockclient.ErrSoldOut) || !errors.As(err, &e) || *e.Stock != 0 || *e.Qty != 1 || e.SKU != "c-1" {
		t.Fatalf("decrement of a sold-out item: %v", err)
	}
	keyed := stockclient.Call{Method: http.MethodPost, Route: stockclient.RouteDecrement, Keyed: true}
	if stockclient.Retryable(keyed, err) {
		t.Fatal("sold_out is retryable")
	}
	_, err = c.Decrement(ctx, "c-1", 1, "etcd-lock")
	if !errors.Is(err, stockclient.ErrStrategyUnavailable) || stockclient.Retryable(keyed, err) {
		t.Fatalf("etcd-lock on a replica without etcd: %v (retryable %v)", err, stockclient.Retryable(keyed, err))
	}
	if _, ok := stockclient.RetryAfter(err); ok {
		t.Fatal("strategy_unavailable carries Retry-After")
	}

	// The ledger, in pages and whole.
	all, err := c.AllOrders(ctx, "c-1", time.Time{})
	if err != nil || len(all) != 2 || all[0].ID != s1.OrderID || all[0].Key != key {
		t.Fatalf("AllOrders: %+v, %v", all, err)
	}
	p, err := c.Orders(ctx, "c-1", stockclient.OrdersQuery{Limit: 1})
	if err != nil || p.Count != 1 || p.Next == "" {
		t.Fatalf("first page of 1: %+v, %v", p, err)
	}
	p, err = c.Orders(ctx, "c-1", stockclient.OrdersQuery{Limit: 1, After: p.Next})
	if err != nil || p.Count != 1 || p.Orders[0].ID == s1.OrderID {
		t.Fatalf("second page of 1: %+v, %v", p, err)
	}
	if _, err := c.Orders(ctx, "c-1", stockclient.OrdersQuery{After: "junk"}); !errors.Is(err, stockclient.ErrInvalidCursor) {
		t.Fatalf("a bad cursor: %v", err)
	}

	// Operations.
	if h, err := c.Health(ctx); err != nil || h.Status != "ok" || h.Replica != "c1" {
		t.Fatalf("Health: %+v, %v", h, err)
	}
	if h, err := c.Ready(ctx); err != nil || h.Status != "ready" || h.Checks["mongodb"] != "ok" {
		t.Fatalf("Ready: %+v, %v", h, err)
	}
	if m, err := c.Metrics(ctx); err != nil || !bytes.Contains(m, []byte("stock_decrements_total")) {
		t.Fatalf("Metrics: %d bytes, %v", len(m), err)
	}
	if d, err := c.OpenAPI(ctx); err != nil || !bytes.Equal(d, server.OpenAPI()) {
		t.Fatalf("OpenAPI: %d bytes, %v", len(d), err)
	}
	if err := c.WaitReady(ctx, []string{base}, 5*time.Second, nil); err != nil {
		t.Fatal(err)
	}
}

// TestRetry: a decrement that finds the item's lock busy gets 503
// lock_unavailable with Retry-After; WithRetry waits that long and sells on
// a later attempt, while a client without it reports the 503.
func TestRetry(t *testing.T) {
	base := replica(t, func(c *server.Config) {
		c.Demo, c.RMWDelay, c.LockWait = true, 700*time.Millisecond, 100*time.Millisecond
	})
	ctx := t.Context()
	plain := stockclient.New(base, stockclient.WithAdminToken(adminToken))
	retrying := stockclient.New(base, stockclient.WithRetry(stockclient.Retry{Attempts: 10}))
	if _, err := plain.PutItem(ctx, "r-1", 5); err != nil {
		t.Fatal(err)
	}
	// The holder takes the lock through a retrying client, and the
	// contender asks only once the replica reports the lease held (its
	// /healthz): an uncontended acquisition through the embedded store
	// can itself outlast the 100 ms lock wait on a loaded machine (the
	// race detector, other test binaries), and the contender must find
	// the lock busy, not free or still being taken.
	holder := make(chan error)
	busy := func() {
		go func() {
			_, err := retrying.Decrement(ctx, "r-1", 1, "mongo-lease")
			holder <- err
		}()
		for {
			select {
			case err := <-holder:
				t.Fatalf("the holder's purchase ended (%v) before its lease was seen held", err)
			default:
			}
			h, err := plain.Health(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if h.LocksHeld["mongo-lease"] > 0 {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	busy()
	_, err := plain.Decrement(ctx, "r-1", 1, "mongo-lease")
	ra, ok := stockclient.RetryAfter(err)
	unkeyed := stockclient.Call{Method: http.MethodPost, Route: stockclient.RouteDecrement}
	if !errors.Is(err, stockclient.ErrLockUnavailable) || !ok || ra != time.Second || !stockclient.Retryable(unkeyed, err) {
		t.Fatalf("without retries: %v (Retry-After %v); want a retryable lock_unavailable after 1s", err, ra)
	}
	if err := <-holder; err != nil {
		t.Fatal(err)
	}

	busy()
	start := time.Now()
	s, err := retrying.Decrement(ctx, "r-1", 1, "mongo-lease")
	if err != nil || time.Since(start) < time.Second {
		t.Fatalf("with retries: %+v, %v after %v; want a sale after the Retry-After", s, err, time.Since(start))
	}
	if err := <-holder; err != nil {
		t.Fatal(err)
	}
	if it, err := plain.GetItem(ctx, "r-1"); err != nil || it.Stock != 2 {
		t.Fatalf("stock %d, %v; want 2 (three sales of 5)", it.Stock, err)
	}
}

// TestRetryable: the rules beyond the service's documented answers (which
// TestRetryContract checks against docs/api.md): no answer, answers that
// are not the service's, and the service's codes at a status the contract
// does not give them.
func TestRetryable(t *testing.T) {
	get := stockclient.Call{Method: http.MethodGet, Route: stockclient.RouteItem}
	put := stockclient.Call{Method: http.MethodPut, Route: stockclient.RouteItem}
	dec := stockclient.Call{Method: http.MethodPost, Route: stockclient.RouteDecrement}
	keyed := stockclient.Call{Method: http.MethodPost, Route: stockclient.RouteDecrement, Keyed: true}
	for _, c := range []struct {
		err  error
		call stockclient.Call
		want bool
	}{
		{&stockclient.Error{Status: 503, Code: "lock_unavailable"}, dec, true},
		{&stockclient.Error{Status: 503, Code: "store_unavailable"}, put, true},
		// A known code at another status is not provably the service's.
		{&stockclient.Error{Status: 500, Code: "lock_unavailable"}, dec, false},
		{&stockclient.Error{Status: 500, Code: "lock_unavailable"}, keyed, true},
		{&stockclient.Error{Status: 503, Code: "no_such_code"}, dec, false},
		{&stockclient.Error{Status: 503, Code: "no_such_code"}, get, true},
		{&stockclient.Error{Status: 500, Code: "outcome_unknown"}, put, false},
		{&stockclient.Error{Status: 502, Body: "bad gateway"}, keyed, true},
		{&stockclient.Error{Status: 502, Body: "bad gateway"}, dec, false},
		{&stockclient.Error{Status: 502, Body: "bad gateway"}, put, false},
		// A proxy's 503 (no code): it may have forwarded the request.
		{&stockclient.Error{Status: 503, Body: `{"error":"Service Unavailable"}`}, dec, false},
		{&stockclient.Error{Status: 503, Body: `{"error":"Service Unavailable"}`}, keyed, true},
		{&stockclient.Error{Status: 503, Body: `{"error":"Service Unavailable"}`}, get, true},
		{&stockclient.Error{Status: 404, Body: "not found"}, get, false},
		{errors.New("connection reset"), dec, false},
		{errors.New("connection reset"), put, false},
		{errors.New("connection reset"), keyed, true},
		// An attempt's own timeout is a lost answer; a cancelled call is not retried.
		{context.DeadlineExceeded, get, true},
		{context.DeadlineExceeded, dec, false},
		{context.Canceled, get, false},
	} {
		if got := stockclient.Retryable(c.call, c.err); got != c.want {
			t.Errorf("Retryable(%+v, %v) = %v; want %v", c.call, c.err, got, c.want)
		}
	}
}

// TestRetryWithoutTheService: a proxy's 503 is not the service's "nothing
// changed": a decrement without an Idempotency-Key is sent once, one with
// a key is retried; and an attempt that outlives WithTimeout is retried
// as a lost answer.
func TestRetryWithoutTheService(t *testing.T) {
	var calls atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, "upstream connect error or disconnect/reset before headers", http.StatusServiceUnavailable)
	}))
	defer proxy.Close()
	c := stockclient.New(proxy.URL, stockclient.WithRetry(stockclient.Retry{Attempts: 3, Base: time.Millisecond}))
	if _, err := c.Decrement(t.Context(), "p-1", 1, "atomic"); err == nil || calls.Load() != 1 {
		t.Errorf("decrement without a key through a failing proxy: %v after %d sends; want an error after 1", err, calls.Load())
	}
	calls.Store(0)
	if _, err := c.Decrement(t.Context(), "p-1", 1, "atomic", stockclient.IdempotencyKey("k-1")); err == nil || calls.Load() != 3 {
		t.Errorf("decrement with a key through a failing proxy: %v after %d sends; want an error after 3", err, calls.Load())
	}

	var slow atomic.Int32
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slow.Add(1) == 1 {
			time.Sleep(300 * time.Millisecond)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"sku":"p-1","stock":3,"version":1}`))
	}))
	defer svc.Close()
	c = stockclient.New(svc.URL, stockclient.WithTimeout(50*time.Millisecond), stockclient.WithRetry(stockclient.Retry{Attempts: 3, Base: time.Millisecond}))
	if it, err := c.GetItem(t.Context(), "p-1"); err != nil || it.Stock != 3 || slow.Load() != 2 {
		t.Errorf("a read whose first attempt timed out: %+v, %v after %d attempts; want stock 3 after 2", it, err, slow.Load())
	}
}

func TestSKUOfURL(t *testing.T) {
	for u, want := range map[string]string{
		"http://h:1/v1/items/abc-1/decrement": "abc-1",
		"http://h:1/v1/items/a%2Fb/decrement": "a/b",
		"/v1/items/x?limit=1":                 "x",
		"http://h:1/healthz":                  "",
	} {
		if got := stockclient.SKUOfURL(u); got != want {
			t.Errorf("SKUOfURL(%q) = %q; want %q", u, got, want)
		}
	}
}
