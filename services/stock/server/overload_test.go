package server_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/stocklock/stocklock/pkg/inventory/mongostore"
	"github.com/stocklock/stocklock/services/stock/server"
)

// TestFloodIsShed: a replica flooded with far more concurrent sales than
// its bound answers some of them 503 overloaded with Retry-After, and
// those did no store work (every decrement that reached the handler is
// counted, and the counts add up to the answers that were not shed);
// meanwhile its admin GET and PUT answer and its heartbeat advances; and
// it sells exactly the units the stock lost, never more than it had.
func TestFloodIsShed(t *testing.T) {
	cfg := testConfig(t, "r1")
	cfg.SalesLimit, cfg.SalesQueue, cfg.SalesQueueWait = 2, 4, 200*time.Millisecond
	cfg.DeadAfter = time.Second // a beat every 200 ms
	// Each mongo-lease sale holds its slot for at least the delay.
	cfg.Demo, cfg.RMWDelay = true, 20*time.Millisecond
	h := newServer(t, cfg).Handler()
	const stock = 30
	putStock(t, h, "herd", stock)
	putStock(t, h, "admin", 1)

	mc, err := mongo.Connect(options.Client().ApplyURI(mongoURI))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mc.Disconnect(t.Context()) })
	beats := mc.Database(cfg.DB).Collection(mongostore.HeartbeatsCollection)
	beat := func() int64 {
		var hb struct {
			Beat int64 `bson:"beat"`
		}
		if err := beats.FindOne(t.Context(), bson.D{{Key: "replica", Value: "r1"}}).Decode(&hb); err != nil {
			t.Fatalf("read r1's heartbeat: %v", err)
		}
		return hb.Beat
	}
	beatBefore := beat()

	const buyers = 40
	var (
		mu      sync.Mutex
		answers []answered
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	for i := range buyers {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				var hdr []string
				if i%2 == 0 { // keyed and unkeyed sales alike
					hdr = []string{"Idempotency-Key", fmt.Sprintf("flood-%d-%d", i, n)}
				}
				a := ask(h, http.MethodPost, "/v1/items/herd/decrement", `{"qty":1,"strategy":"mongo-lease"}`, hdr...)
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
				time.Sleep(100 * time.Millisecond) // a buyer who clicks again, not a hot loop
			}
		})
	}
	// The control plane during the flood: every admin read and write
	// answers, and the heartbeat goes on (counted, not timed: this
	// machine may be slow).
	const adminRounds = 3
	for round := range adminRounds {
		if a := ask(h, http.MethodGet, "/v1/items/herd", ""); a.status != http.StatusOK {
			t.Errorf("admin GET during the flood: %+v", a)
		}
		if a := ask(h, http.MethodPut, "/v1/items/admin", `{"stock":`+itoa(round)+`}`); a.status != http.StatusOK {
			t.Errorf("admin PUT during the flood: %+v", a)
		}
	}
	for end := time.Now().Add(time.Minute); beat()-beatBefore < 2 && time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond)
	}
	beatAfter := beat()
	close(stop)
	wg.Wait()

	kinds := map[string]int{}
	sold := 0
	for _, a := range answers {
		kinds[fmt.Sprint(a.status, " ", a.code)]++
		switch {
		case a.status == http.StatusOK:
			sold++
		case a.code == "overloaded" && a.retryAfter == "":
			t.Errorf("503 overloaded without Retry-After")
		}
	}
	t.Logf("%d answers: %v; heartbeat %d -> %d", len(answers), kinds, beatBefore, beatAfter)
	shed := kinds["503 overloaded"]
	if shed == 0 {
		t.Fatalf("no request of %d buyers against a bound of %d working and %d waiting was shed: %v", buyers, cfg.SalesLimit, cfg.SalesQueue, kinds)
	}
	if beatAfter-beatBefore < 2 {
		t.Errorf("r1's heartbeat went from %d to %d in a minute of flood; want it beating", beatBefore, beatAfter)
	}

	// Shed requests did no store work: every decrement that reached the
	// handler is counted by its result, and those add up to the answers
	// that were not shed; the shed ones are counted by reason.
	m := scrape(t, h)
	handled, shedCounted := 0.0, 0.0
	for labels, v := range m["stock_decrements_total"] {
		if strings.Contains(labels, `strategy="mongo-lease"`) {
			handled += v
		}
	}
	for _, v := range m["stock_sales_shed_total"] {
		shedCounted += v
	}
	if timed := m["stock_sales_shed_seconds_count"][""]; int(timed) != shed {
		t.Errorf("stock_sales_shed_seconds timed %v shed answers; want %d", timed, shed)
	}
	if int(handled) != len(answers)-shed || int(shedCounted) != shed {
		t.Errorf("decrements handled %v, shed %v; want %d and %d (of %d answers)", handled, shedCounted, len(answers)-shed, shed, len(answers))
	}
	if m["stock_sales_in_flight"][""] != 0 || m["stock_sales_waiting"][""] != 0 {
		t.Errorf("after the flood: %v in flight, %v waiting; want none", m["stock_sales_in_flight"], m["stock_sales_waiting"])
	}

	// Safety: the units sold are the units the stock lost, each in the ledger.
	left := stockOf(t, h, "herd")
	if left < 0 || int64(sold) != stock-left {
		t.Errorf("sold %d; the stock went from %d to %d", sold, stock, left)
	}
	_, out := call(t, h, http.MethodGet, "/v1/items/herd/orders?limit=1000", "", "")
	if n := int(out["count"].(float64)); n != sold {
		t.Errorf("%d orders in the ledger; %d sales answered", n, sold)
	}
}

// TestControlTrafficHasItsOwnClients: heartbeats and recovery go through
// the background client, the admin routes through the control client, and
// sales through the sales client, each its own connection pool: sales
// that take every connection of theirs cannot delay the others.
func TestControlTrafficHasItsOwnClients(t *testing.T) {
	cfg := testConfig(t, "r1")
	cfg.DeadAfter, cfg.RecoveryEvery = time.Second, 100*time.Millisecond
	type sent struct{ role, name, coll, cmd string }
	var (
		mu   sync.Mutex
		seen []sent
	)
	server.SetCommandMonitor(&cfg, func(role string) *event.CommandMonitor {
		return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
			coll, _ := e.Command.Index(0).Value().StringValueOK()
			mu.Lock()
			seen = append(seen, sent{role, e.CommandName, coll, e.Command.String()})
			mu.Unlock()
		}}
	})
	h := newServer(t, cfg).Handler()
	mu.Lock()
	seen = nil // start-up is done
	mu.Unlock()
	putStock(t, h, "ctl-item", 5)
	_ = stockOf(t, h, "ctl-item")
	putStock(t, h, "ctl-sale", 5)
	want(t, "a sale", ask(h, http.MethodPost, "/v1/items/ctl-sale/decrement", `{"qty":1,"strategy":"atomic"}`, "Idempotency-Key", "ctl-k"), http.StatusOK, "")

	count := func(role, coll string) (n int) {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range seen {
			if s.role == role && s.coll == coll {
				n++
			}
		}
		return n
	}
	// redis-stock's recovery pass: its find of the skus loaded into Redis.
	redisPasses := func(role string) (n int) {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range seen {
			if s.name == "find" && s.coll == mongostore.ItemsCollection && strings.Contains(s.cmd, `"epoch": {"$exists"`) {
				n += map[bool]int{true: 1}[s.role == role || role == ""]
			}
		}
		return n
	}
	// Two beats (an update and a find each), a keys pass (a find of the
	// attempts) and a pass of redis-stock's recovery at least.
	for end := time.Now().Add(time.Minute); (count("background", mongostore.HeartbeatsCollection) < 4 || count("background", mongostore.AttemptsCollection) < 1 || redisPasses("") < 1) && time.Now().Before(end); {
		time.Sleep(50 * time.Millisecond)
	}
	if all, bg := redisPasses(""), redisPasses("background"); all < 1 || bg != all {
		t.Errorf("redis-stock's recovery finds: %d, %d of them through the background client; want at least one, all there", all, bg)
	}

	beats, passes := count("background", mongostore.HeartbeatsCollection), count("background", mongostore.AttemptsCollection)
	mu.Lock()
	defer mu.Unlock()
	saleOnSales := false
	for _, s := range seen {
		switch {
		case s.coll == mongostore.HeartbeatsCollection && s.role != "background":
			t.Errorf("a heartbeat command (%s) through the %s client", s.name, s.role)
		case s.coll == mongostore.AttemptsCollection && s.name == "find" && s.role != "background":
			t.Errorf("a recovery pass's find of the attempts through the %s client", s.role)
		case strings.Contains(s.cmd, "ctl-item") && s.role != "control":
			t.Errorf("an admin request's %s through the %s client", s.name, s.role)
		case strings.Contains(s.cmd, "ctl-sale") && s.name == "update" && s.coll == mongostore.ItemsCollection:
			saleOnSales = saleOnSales || s.role == "sales"
			if s.role != "sales" {
				t.Errorf("a sale's stock write through the %s client", s.role)
			}
		}
	}
	if !saleOnSales || beats < 4 || passes < 1 {
		t.Errorf("sale's write seen on the sales client %v; heartbeat commands on the background client %d, recovery finds %d", saleOnSales, beats, passes)
	}
}
