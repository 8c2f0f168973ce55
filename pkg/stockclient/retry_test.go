package stockclient_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/stockclient"
	"github.com/stocklock/stocklock/services/stock/server"
)

// gateway is a real HTTP proxy in front of a replica. For the first
// failures requests that match, it forwards the request, waits for the replica's answer, runs
// meanwhile (if set), and then, instead of passing the answer on, answers
// as fail says: a gateway's own JSON 503, or no answer at all (the
// connection closed). Other requests pass through.
type gateway struct {
	*httptest.Server
	forwarded atomic.Int32 // matching requests forwarded to the replica
}

// Ways a gateway fails a matching request once it has forwarded it.
const (
	gatewayJSON503 = iota // 503 {"error":"Service Unavailable"}, as Spring Cloud Gateway's circuit breaker answers
	gatewayHangUp         // close the connection: the answer is lost
)

func newGateway(t *testing.T, replica string, match func(*http.Request) bool, fail, failures int, meanwhile func()) *gateway {
	t.Helper()
	u, err := url.Parse(replica)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	g := &gateway{}
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !match(r) {
			rp.ServeHTTP(w, r)
			return
		}
		if g.forwarded.Add(1) > int32(failures) {
			rp.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		rp.ServeHTTP(rec, r)
		if rec.Code < 200 || rec.Code > 299 {
			t.Errorf("gateway: the replica answered %s %s with %d %s; the test wants it to succeed", r.Method, r.URL.Path, rec.Code, rec.Body)
		}
		if meanwhile != nil {
			meanwhile()
		}
		switch fail {
		case gatewayJSON503:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"timestamp":"2026-12-03T05:00:00Z","path":"`+r.URL.Path+`","status":503,"error":"Service Unavailable","requestId":"1a2b"}`)
		case gatewayHangUp:
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("gateway: hijack: %v", err)
				return
			}
			_ = conn.Close()
		}
	}))
	t.Cleanup(g.Close)
	return g
}

// only matches requests of method whose path ends with suffix.
func only(method, suffix string) func(*http.Request) bool {
	return func(r *http.Request) bool { return r.Method == method && strings.HasSuffix(r.URL.Path, suffix) }
}

func retrying(base string) *stockclient.Client {
	return stockclient.New(base, stockclient.WithAdminToken(adminToken),
		stockclient.WithRetry(stockclient.Retry{Attempts: 4, Base: 10 * time.Millisecond}))
}

// TestGatewayUnavailableBuysOnce: a gateway forwards a decrement, the
// replica sells, and the gateway answers its own 503 {"error": "Service
// Unavailable"}. Without an Idempotency-Key the client must not take that
// for the service's "nothing changed": one Decrement, one order. With a
// key it retries, and the key replays the sale: still one order.
func TestGatewayUnavailableBuysOnce(t *testing.T) {
	base := replica(t, nil)
	ctx := t.Context()
	direct := stockclient.New(base, stockclient.WithAdminToken(adminToken))
	if _, err := direct.PutItem(ctx, "g-1", 10); err != nil {
		t.Fatal(err)
	}
	gw := newGateway(t, base, only(http.MethodPost, "/decrement"), gatewayJSON503, 100, nil)
	c := retrying(gw.URL)

	_, err := c.Decrement(ctx, "g-1", 1, "atomic")
	orders, oerr := direct.AllOrders(ctx, "g-1", time.Time{})
	if oerr != nil {
		t.Fatal(oerr)
	}
	if len(orders) != 1 || gw.forwarded.Load() != 1 {
		t.Fatalf("one Decrement without a key through a gateway that answered 503: %d orders, %d sent; want 1 and 1", len(orders), gw.forwarded.Load())
	}
	var e *stockclient.Error
	if !errors.As(err, &e) || e.Status != http.StatusServiceUnavailable || e.Code != "" || e.Replica != "" || !strings.Contains(e.Body, "Service Unavailable") {
		t.Fatalf("decrement through the failing gateway: %v; want its 503, with no service code", err)
	}

	key := stockclient.NewIdempotencyKey()
	if _, err := c.Decrement(ctx, "g-1", 1, "atomic", stockclient.IdempotencyKey(key)); err == nil {
		t.Fatal("a keyed decrement through a gateway that always fails succeeded")
	}
	if orders, err := direct.AllOrders(ctx, "g-1", time.Time{}); err != nil || len(orders) != 2 || gw.forwarded.Load() != 5 {
		t.Fatalf("a keyed Decrement retried through the gateway: %d orders (%v), %d sent; want 2 and 1+4", len(orders), err, gw.forwarded.Load())
	}
	if it, err := direct.GetItem(ctx, "g-1"); err != nil || it.Stock != 8 {
		t.Fatalf("stock %d, %v; want 8", it.Stock, err)
	}
}

// TestLostPutNotRetried: a PUT reaches the replica and sets the stock; a
// sale lands; the PUT's answer is lost. The client must not send it again:
// a second set would erase the sale. With If-Match, a retry would answer
// 412 version_mismatch although the first attempt set the stock: it is
// not sent either.
func TestLostPutNotRetried(t *testing.T) {
	base := replica(t, nil)
	ctx := t.Context()
	direct := stockclient.New(base, stockclient.WithAdminToken(adminToken))
	if _, err := direct.PutItem(ctx, "p-1", 3); err != nil {
		t.Fatal(err)
	}
	sell := func() {
		if _, err := direct.Decrement(context.Background(), "p-1", 1, "atomic"); err != nil {
			t.Errorf("the sale meanwhile: %v", err)
		}
	}
	// The gateway loses the answer of the first PUT only: a retry would
	// reach the replica.
	gw := newGateway(t, base, only(http.MethodPut, "/p-1"), gatewayHangUp, 1, sell)
	_, err := retrying(gw.URL).PutItem(ctx, "p-1", 10)
	if err == nil || stockclient.RuleOf(err) != stockclient.IfIdempotent {
		t.Fatalf("PUT whose answer was lost: %v; want a lost answer", err)
	}
	it, err := direct.GetItem(ctx, "p-1")
	if err != nil {
		t.Fatal(err)
	}
	if it.Stock != 9 || gw.forwarded.Load() != 1 {
		t.Fatalf("a PUT of 10 whose answer was lost, and a sale: stock %d, the PUT sent %d times; want 9 (the sale kept) and once", it.Stock, gw.forwarded.Load())
	}

	gw = newGateway(t, base, only(http.MethodPut, "/p-1"), gatewayHangUp, 1, sell)
	_, err = retrying(gw.URL).PutItem(ctx, "p-1", 20, stockclient.IfMatch(it.Version))
	if err == nil || errors.Is(err, stockclient.ErrVersionMismatch) || gw.forwarded.Load() != 1 {
		t.Fatalf("PUT with If-Match whose answer was lost: %v after %d sends; want the lost answer, sent once", err, gw.forwarded.Load())
	}
	if it, err := direct.GetItem(ctx, "p-1"); err != nil || it.Stock != 19 {
		t.Fatalf("stock %d, %v; want 19 (20, then a sale)", it.Stock, err)
	}
}

// TestLostRestockRetried: a restock reaches replica a and lands, a sale on
// replica b follows, and the answer is lost. The client sends it again
// with the same key, on a (WithRetry) and then on b, while both replicas
// sell: the restock counts once.
func TestLostRestockRetried(t *testing.T) {
	var db string
	a := replica(t, func(c *server.Config) { db = c.DB })
	b := replica(t, func(c *server.Config) { c.DB, c.Replica = db, "c2" })
	ctx := t.Context()
	da := stockclient.New(a, stockclient.WithAdminToken(adminToken))
	db2 := da.At(b)
	const start, qty = 20, 5
	if _, err := da.PutItem(ctx, "s-1", start); err != nil {
		t.Fatal(err)
	}
	var sold atomic.Int64
	sell := func(c *stockclient.Client, strategy string) {
		if _, err := c.Decrement(context.Background(), "s-1", 1, strategy); err == nil {
			sold.Add(1)
		} else if !errors.Is(err, stockclient.ErrConflict) && !errors.Is(err, stockclient.ErrStaleRead) {
			t.Errorf("a sale: %v", err)
		}
	}
	gw := newGateway(t, a, only(http.MethodPost, "/restock"), gatewayHangUp, 1, func() { sell(db2, "atomic") })

	var wg sync.WaitGroup
	for _, c := range []*stockclient.Client{da, db2} {
		for _, st := range []string{"atomic", "optimistic"} {
			wg.Go(func() {
				for range 5 {
					sell(c, st)
				}
			})
		}
	}
	key := stockclient.NewIdempotencyKey()
	it, err := retrying(gw.URL).Restock(ctx, "s-1", qty, stockclient.IdempotencyKey(key))
	if err != nil || gw.forwarded.Load() != 2 {
		t.Fatalf("restock whose first answer was lost: %+v, %v after %d sends; want the item after 2", it, err, gw.forwarded.Load())
	}
	if _, err := db2.Restock(ctx, "s-1", qty, stockclient.IdempotencyKey(key)); err != nil {
		t.Fatalf("the restock again on the other replica: %v", err)
	}
	if _, err := db2.Restock(ctx, "s-1", qty+1, stockclient.IdempotencyKey(key)); !errors.Is(err, stockclient.ErrIdempotencyKeyReused) {
		t.Fatalf("the key with another qty: %v; want idempotency_key_reused", err)
	}
	wg.Wait()
	it, err = da.GetItem(ctx, "s-1")
	if err != nil {
		t.Fatal(err)
	}
	orders, err := da.AllOrders(ctx, "s-1", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if want := start + qty - sold.Load(); it.Stock != want || int64(len(orders)) != sold.Load() {
		t.Fatalf("stock %d with %d orders after %d sales; want %d: the restock counted once", it.Stock, len(orders), sold.Load(), want)
	}
	if _, err := da.Restock(ctx, "s-1", -(it.Stock + 1)); !errors.Is(err, stockclient.ErrInsufficientStock) {
		t.Fatalf("removing more than the stock: %v; want insufficient_stock", err)
	}
}
