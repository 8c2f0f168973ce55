package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
	"github.com/stocklock/stocklock/pkg/inventory/mongostore"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/services/stock/server"
)

// The tests of this file make a replica answer each error code that only a
// fault or a race produces, through the real stores, and check what the
// code promises about the stock.

// answered is one answer: its status, its error code ("" for none) and
// its Retry-After.
type answered struct {
	status     int
	code       string
	retryAfter string
}

// ask sends one request to h and reads its error code; unlike call, it
// may run in any goroutine.
func ask(h http.Handler, method, path, body string, header ...string) answered {
	ct := ""
	if body != "" {
		ct = jsonCT
	}
	rec := send(h, method, path, ct, body, header...)
	var e struct {
		Code string `json:"error"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &e)
	return answered{rec.Code, e.Code, rec.Header().Get("Retry-After")}
}

// stockOf reads sku's stock through h.
func stockOf(t *testing.T, h http.Handler, sku string) int64 {
	t.Helper()
	rec, out := call(t, h, http.MethodGet, "/v1/items/"+sku, "", "")
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", sku, rec.Code, rec.Body)
	}
	return int64(out["stock"].(float64))
}

// putStock sets sku's stock through h.
func putStock(t *testing.T, h http.Handler, sku string, stock int) {
	t.Helper()
	if a := ask(h, http.MethodPut, "/v1/items/"+sku, `{"stock":`+itoa(stock)+`}`); a.status != http.StatusOK {
		t.Fatalf("PUT %s: %+v", sku, a)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// want fails the test unless a is status and code, with Retry-After on
// every 503 but strategy_unavailable and on idempotency_in_progress.
func want(t *testing.T, what string, a answered, status int, code string) {
	t.Helper()
	if a.status != status || a.code != code {
		t.Fatalf("%s: %d %s; want %d %s", what, a.status, a.code, status, code)
	}
	if retry := status == http.StatusServiceUnavailable || code == "idempotency_in_progress"; retry != (a.retryAfter != "") {
		t.Fatalf("%s: %d %s with Retry-After %q", what, a.status, a.code, a.retryAfter)
	}
}

// TestConflictAndTimeout: two optimistic decrements that read the same
// version, with one compare-and-set attempt each, sell once and answer 503
// conflict once; an optimistic decrement whose read-modify-write delay
// outlasts the request timeout answers 503 timeout and sells nothing.
func TestConflictAndTimeout(t *testing.T) {
	t.Parallel() // its own database and skus; it mostly waits
	cfg := testConfig(t, "r1")
	cfg.Demo, cfg.RMWDelay, cfg.CASAttempts = true, 500*time.Millisecond, 1
	h := newServer(t, cfg).Handler()
	putStock(t, h, "cas", 5)
	var wg sync.WaitGroup
	got := make([]answered, 2)
	for i := range got {
		wg.Go(func() {
			got[i] = ask(h, http.MethodPost, "/v1/items/cas/decrement", `{"qty":1,"strategy":"optimistic"}`)
		})
	}
	wg.Wait()
	if got[0].status == http.StatusOK {
		got[0], got[1] = got[1], got[0]
	}
	want(t, "the loser", got[0], http.StatusServiceUnavailable, "conflict")
	want(t, "the winner", got[1], http.StatusOK, "")
	if n := stockOf(t, h, "cas"); n != 4 {
		t.Fatalf("stock %d after one sale of 5; want 4", n)
	}

	cfg = testConfig(t, "r2")
	cfg.Demo, cfg.RMWDelay = true, 3*time.Second
	cfg.RequestTimeout, cfg.LockWait = time.Second, 500*time.Millisecond
	h = newServer(t, cfg).Handler()
	putStock(t, h, "slow", 5)
	want(t, "a decrement slower than the request timeout",
		ask(h, http.MethodPost, "/v1/items/slow/decrement", `{"qty":1,"strategy":"optimistic"}`), http.StatusServiceUnavailable, "timeout")
	if n := stockOf(t, h, "slow"); n != 5 {
		t.Fatalf("stock %d after a timeout; want 5", n)
	}
}

// TestShuttingDown: once Shutdown has begun, a decrement and a PUT answer
// 503 shutting_down and change nothing.
func TestShuttingDown(t *testing.T) {
	cfg := testConfig(t, "r1")
	s, err := server.New(t.Context(), cfg, server.NewLogger(t.Output(), cfg))
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	putStock(t, h, "bye", 5)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	want(t, "decrement", ask(h, http.MethodPost, "/v1/items/bye/decrement", `{"qty":1}`), http.StatusServiceUnavailable, "shutting_down")
	want(t, "PUT", ask(h, http.MethodPut, "/v1/items/bye", `{"stock":9}`), http.StatusServiceUnavailable, "shutting_down")
}

// TestFencedAnswer: a mongo-lease holder stalls just before its stock
// write (--write-stall); a replica whose clock runs 20 s ahead takes its
// lease over as expired and sells; the stalled holder's write, carrying
// the older token, is refused: 503 fenced, and only one unit is sold.
func TestFencedAnswer(t *testing.T) {
	t.Parallel() // its own database and skus; it mostly waits
	reps := make([]http.Handler, 2)
	var db string
	for i, tweak := range []func(*server.Config){
		func(c *server.Config) { c.WriteStall = 2 * time.Second },
		func(c *server.Config) { c.ClockOffset = 20 * time.Second },
	} {
		cfg := testConfig(t, "r"+itoa(i+1))
		if db == "" {
			db = cfg.DB
		}
		cfg.DB, cfg.Demo = db, true
		tweak(&cfg)
		reps[i] = newServer(t, cfg).Handler()
	}
	putStock(t, reps[0], "fence", 5)
	stalled := make(chan answered)
	go func() {
		stalled <- ask(reps[0], http.MethodPost, "/v1/items/fence/decrement", `{"qty":1,"strategy":"mongo-lease"}`)
	}()
	time.Sleep(700 * time.Millisecond) // the holder is in its stall
	want(t, "the replica that took the lease over", ask(reps[1], http.MethodPost, "/v1/items/fence/decrement", `{"qty":1,"strategy":"mongo-lease"}`), http.StatusOK, "")
	want(t, "the stalled holder", <-stalled, http.StatusServiceUnavailable, "fenced")
	if n := stockOf(t, reps[0], "fence"); n != 4 {
		t.Fatalf("stock %d; want 4", n)
	}
}

// TestAttemptAbandonedAnswer: a keyed decrement is between its read and
// its stock write when another store, which has seen this replica's
// heartbeat stand still, gives its attempt up. The write is refused: 503
// attempt_abandoned, nothing sold; a retry with the same key sells once.
// Meanwhile a second request with the key answers 409
// idempotency_in_progress.
func TestAttemptAbandonedAnswer(t *testing.T) {
	t.Parallel() // its own database and skus; it mostly waits
	cfg := testConfig(t, "r1")
	// Beats every 12 minutes: to the judge below it looks dead at once.
	cfg.Demo, cfg.RMWDelay, cfg.DeadAfter, cfg.RecoveryEvery = true, 3*time.Second, time.Hour, time.Hour
	h := newServer(t, cfg).Handler()
	putStock(t, h, "ghost", 5)
	const body = `{"qty":1,"strategy":"optimistic"}`
	first := make(chan answered)
	go func() { first <- ask(h, http.MethodPost, "/v1/items/ghost/decrement", body, "Idempotency-Key", "k1") }()
	time.Sleep(300 * time.Millisecond)
	want(t, "the same key meanwhile", ask(h, http.MethodPost, "/v1/items/ghost/decrement", body, "Idempotency-Key", "k1"),
		http.StatusConflict, "idempotency_in_progress")

	mc, err := mongo.Connect(options.Client().ApplyURI(mongoURI))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mc.Disconnect(context.Background()) })
	judge, err := mongostore.NewStore(mc.Database(cfg.DB), mongostore.StoreOptions{Replica: "judge", DeadAfter: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var a answered
	for done := false; !done; {
		if _, err := judge.Heartbeat(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, err := judge.RecoverKeys(t.Context()); err != nil {
			t.Fatal(err)
		}
		select {
		case a = <-first:
			done = true
		case <-time.After(150 * time.Millisecond):
		}
	}
	want(t, "the given-up request", a, http.StatusServiceUnavailable, "attempt_abandoned")
	if n := stockOf(t, h, "ghost"); n != 5 {
		t.Fatalf("stock %d after an abandoned attempt; want 5", n)
	}
	want(t, "the retry", ask(h, http.MethodPost, "/v1/items/ghost/decrement", body, "Idempotency-Key", "k1"), http.StatusOK, "")
	if n := stockOf(t, h, "ghost"); n != 4 {
		t.Fatalf("stock %d after the retry; want 4", n)
	}
}

// TestInternalAnswer: a panic in a request (here between the stock write
// and the ledger write) answers 500 internal, and the sale it made stands,
// pending in the item for recovery to record.
func TestInternalAnswer(t *testing.T) {
	cfg := testConfig(t, "r1")
	cfg.RecoveryEvery = time.Hour
	server.SetAfterTake(&cfg, func(inventory.Order) { panic("test: a bug between the stock write and the ledger write") })
	h := newServer(t, cfg).Handler()
	putStock(t, h, "bug", 5)
	want(t, "a decrement that panics", ask(h, http.MethodPost, "/v1/items/bug/decrement", `{"qty":1,"strategy":"atomic"}`), http.StatusInternalServerError, "internal")
	_, out := call(t, h, http.MethodGet, "/v1/items/bug", "", "")
	if out["stock"].(float64) != 4 || len(out["pending"].(map[string]any)) != 1 {
		t.Fatalf("item after the panic: %v; want stock 4 and its order pending", out)
	}
}

// TestStoreFaultAnswers: a stock write whose connection drops once it is
// sent answers 500 outcome_unknown (the sale may have happened); a read
// whose connection drops, and any request while MongoDB cannot be reached,
// answer 503 store_unavailable.
//
// A write without an answer may land at any time after it: on a loaded
// machine the store can take seconds over it, and a later read of the
// document need not wait for it. So each write is cut on a sku of its own:
// once, with all of them on one sku, the unanswered sale landed after the
// restock's first read, and the restock seemed to add 9.
func TestStoreFaultAnswers(t *testing.T) {
	t.Parallel() // its own database and skus; it mostly waits
	p := devstoretest.MongoProxy(t, mongoURI)
	cfg := testConfig(t, "r1")
	// Fails fast when the proxy is down, and never retries a write on its own.
	cfg.MongoURI = "mongodb://" + p.Addr() + "/?serverSelectionTimeoutMS=1000&connectTimeoutMS=1000&retryWrites=false&retryReads=false"
	// No heartbeat or recovery writes to be taken for the stock write.
	cfg.Demo, cfg.RMWDelay, cfg.DeadAfter, cfg.RecoveryEvery = true, time.Second, time.Hour, time.Hour
	h := newServer(t, cfg).Handler()
	putStock(t, h, "cut", 5)

	unknown := make(chan answered)
	go func() {
		unknown <- ask(h, http.MethodPost, "/v1/items/cut/decrement", `{"qty":1,"strategy":"optimistic"}`)
	}()
	time.Sleep(300 * time.Millisecond) // read, and in the delay before the write
	// The stock write is an update command: once it is sent, its answer
	// never comes back.
	p.Cut("update\x00")
	want(t, "a stock write without an answer", <-unknown, http.StatusInternalServerError, "outcome_unknown")

	if n := stockOf(t, h, "cut"); n != 4 && n != 5 {
		t.Fatalf("stock %d; want 5, or 4 if the unanswered write landed", n)
	}

	// A PUT whose write got no answer may have set the stock: not 503
	// store_unavailable ("nothing changed") but 500 outcome_unknown.
	putStock(t, h, "cut-put", 5)
	p.Cut("update\x00")
	want(t, "a PUT without an answer", ask(h, http.MethodPut, "/v1/items/cut-put", `{"stock":7}`), http.StatusInternalServerError, "outcome_unknown")
	// A restock likewise; sent again with its key, it applies once,
	// whenever the unanswered one lands.
	putStock(t, h, "cut-restock", 5)
	before := stockOf(t, h, "cut-restock")
	p.Cut("update\x00")
	want(t, "a restock without an answer", ask(h, http.MethodPost, "/v1/items/cut-restock/restock", `{"qty":10}`, "Idempotency-Key", "rk"),
		http.StatusInternalServerError, "outcome_unknown")
	landed := stockOf(t, h, "cut-restock")
	for range 2 {
		want(t, "the restock again, with its key", ask(h, http.MethodPost, "/v1/items/cut-restock/restock", `{"qty":10}`, "Idempotency-Key", "rk"), http.StatusOK, "")
	}
	if n := stockOf(t, h, "cut-restock"); n != before+10 || (landed != before && landed != before+10) {
		t.Fatalf("stock %d before, %d after the unanswered restock, %d after two retries; want the 10 units added once", before, landed, n)
	}

	p.Cut("find\x00")
	want(t, "a read whose connection drops", ask(h, http.MethodGet, "/v1/items/cut", ""), http.StatusServiceUnavailable, "store_unavailable")

	// MongoDB gone: the driver's server selection runs out (1 s here),
	// which is the store's unavailability, not the request's timeout.
	p.Close()
	want(t, "a read with MongoDB unreachable", ask(h, http.MethodGet, "/v1/items/cut", ""), http.StatusServiceUnavailable, "store_unavailable")
	want(t, "a decrement with MongoDB unreachable", ask(h, http.MethodPost, "/v1/items/cut/decrement", `{"qty":1,"strategy":"atomic"}`),
		http.StatusServiceUnavailable, "store_unavailable")
}

// TestLockUnavailableAnswer: a redis-lock holder stalls for 3 s before its
// stock write (--write-stall), holding the sku's lock; a second decrement
// of the sku waits its lock wait of 300 ms and answers 503
// lock_unavailable, having changed nothing; the holder then sells.
func TestLockUnavailableAnswer(t *testing.T) {
	t.Parallel() // its own database and sku; it mostly waits
	cfg := testConfig(t, "r1")
	cfg.Demo, cfg.WriteStall, cfg.LockWait = true, 3*time.Second, 300*time.Millisecond
	h := newServer(t, cfg).Handler()
	putStock(t, h, "busy", 5)
	holder := make(chan answered)
	go func() {
		holder <- ask(h, http.MethodPost, "/v1/items/busy/decrement", `{"qty":1,"strategy":"redis-lock"}`)
	}()
	time.Sleep(time.Second) // the holder is in its stall
	want(t, "a decrement while the holder stalls", ask(h, http.MethodPost, "/v1/items/busy/decrement", `{"qty":1,"strategy":"redis-lock"}`), http.StatusServiceUnavailable, "lock_unavailable")
	want(t, "the holder", <-holder, http.StatusOK, "")
	if n := stockOf(t, h, "busy"); n != 4 {
		t.Fatalf("stock %d after one sale of 5; want 4", n)
	}
}
