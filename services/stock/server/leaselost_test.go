package server_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/strategy"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/pkg/lock/etcdlock"
	"github.com/stocklock/stocklock/pkg/lock/redislock"
	"github.com/stocklock/stocklock/pkg/stockapi"
	"github.com/stocklock/stocklock/services/stock/server"
)

// TestLeaseLost loses a replica's lease while a decrement sits inside its
// critical section, by a real event on the lock's own server, and checks
// over HTTP that the request gives up without writing: 503 lease_lost,
// stock and version untouched, no order in the ledger, and the replica's
// stock_leases_lost_total counted it. Once per lease strategy.
//
// The RMW delay of a minute is what makes the test able to fail: a request
// whose critical section did not stop with its lease would sleep the whole
// minute and then write (the fence alone does not stop it, since nobody
// registered a newer token), answering 200 with stock 4. Only the lease's
// Guard context, cancelled by the watchdog when its renewal finds the lease
// gone, ends it early with lease_lost.
func TestLeaseLost(t *testing.T) {
	const initial = 5

	etcd := devstoretest.Etcd(t)
	var cfg server.Config
	rep := startReplicas(t, 1, func(c *server.Config) {
		c.EtcdEndpoints = etcd.Endpoints
		// Renewed every third of a second: a lost lease is noticed quickly,
		// yet a second is plenty for a renewal on the gated FerretDB.
		c.LockTTL = time.Second
		// Far longer than the test needs; see above.
		c.Demo, c.RMWDelay = true, time.Minute
		// Longer than the delay, so that a request that ignored its lease
		// would write and answer 200 rather than time out (and longer than
		// startReplicas's lock wait, which Validate requires).
		c.RequestTimeout = 2 * time.Minute
		cfg = *c
	})[0]

	// The client outlasts the request timeout: the server, not the client,
	// must decide how the request ends.
	client := &http.Client{Timeout: cfg.RequestTimeout + time.Minute}
	t.Cleanup(client.CloseIdleConnections)

	// Clients of our own on the replica's stores, to play the fault.
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() { _ = rdb.Close() })
	mc, err := mongo.Connect(options.Client().ApplyURI(mongoURI))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = mc.Disconnect(ctx)
	})
	locks := mc.Database(cfg.DB).Collection(server.LocksCollection)
	etcdClient := devstoretest.EtcdClient(t, etcd)

	// ownedByReplica reports whether a lock owner is one of this replica's
	// (owners are the replica name, a dash and a random suffix), so that a
	// fault never hits a lease it was not meant for.
	ownedByReplica := func(owner string) bool { return strings.HasPrefix(owner, rep.name+"-") }

	cases := []struct {
		strategy string
		// loseLease ends, on the lock's server, the replica's lease on the
		// item's lock key, as a real fault would; the replica is not told.
		loseLease func(t *testing.T, ctx context.Context, key string)
	}{
		{
			// A Redis failover to a replica that never saw the grant, or an
			// eviction: the lease key is gone. The fence counter stays, as
			// it would with persistence.
			strategy: strategy.RedisLock,
			loseLease: func(t *testing.T, ctx context.Context, key string) {
				rk := redislock.KeyName(redislock.KeyPrefix(cfg.DB), key)
				v, err := rdb.Get(ctx, rk).Result()
				if err != nil {
					t.Fatalf("GET %s: %v", rk, err)
				}
				// The value is "<token>:<owner>".
				if _, owner, _ := strings.Cut(v, ":"); !ownedByReplica(owner) {
					t.Fatalf("%s holds %q, not a lease of %s", rk, v, rep.name)
				}
				if n, err := rdb.Del(ctx, rk).Result(); err != nil || n != 1 {
					t.Fatalf("DEL %s: deleted %d, %v", rk, n, err)
				}
			},
		},
		{
			// Another owner took the key over, as a contender whose clock
			// runs ahead would: new owner, next token. The document itself
			// stays (mongolock's tokens live in it; see its package doc).
			strategy: strategy.MongoLease,
			loseLease: func(t *testing.T, ctx context.Context, key string) {
				var cur struct {
					Owner string `bson:"owner"`
					Token int64  `bson:"token"`
				}
				if err := locks.FindOne(ctx, bson.D{{Key: "_id", Value: key}}).Decode(&cur); err != nil {
					t.Fatalf("find lease %s: %v", key, err)
				}
				if !ownedByReplica(cur.Owner) {
					t.Fatalf("lease %s is owned by %q, not by %s", key, cur.Owner, rep.name)
				}
				res, err := locks.UpdateOne(ctx,
					bson.D{{Key: "_id", Value: key}, {Key: "owner", Value: cur.Owner}, {Key: "token", Value: cur.Token}},
					bson.D{
						{Key: "$set", Value: bson.D{{Key: "owner", Value: "lease-thief"}}},
						{Key: "$inc", Value: bson.D{{Key: "token", Value: int64(1)}}},
					})
				if err != nil || res.MatchedCount != 1 {
					t.Fatalf("take lease %s over: %+v, %v", key, res, err)
				}
			},
		},
		{
			// The etcd lease the key rides on ends (revoked here, as an
			// operator or an expiry on the server would end it), and etcd
			// deletes the key with it.
			strategy: strategy.EtcdLock,
			loseLease: func(t *testing.T, ctx context.Context, key string) {
				// The etcd key, from a backend with the replica's
				// per-database prefix (as server.New builds it).
				eb, err := etcdlock.New(etcdClient, etcdlock.WithKeyPrefix(etcdlock.KeyPrefix(cfg.DB)))
				if err != nil {
					t.Fatal(err)
				}
				defer eb.Close()
				ek := eb.Key(key)
				resp, err := etcdClient.Get(ctx, ek)
				if err != nil {
					t.Fatalf("get %s: %v", ek, err)
				}
				if len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 || !ownedByReplica(string(resp.Kvs[0].Value)) {
					t.Fatalf("%s is %v, not a lease of %s", ek, resp.Kvs, rep.name)
				}
				if _, err := etcdClient.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
					t.Fatalf("revoke the lease of %s: %v", ek, err)
				}
			},
		},
	}

	for _, tc := range cases {
		t.Run(tc.strategy, func(t *testing.T) {
			// Unique on the Redis and etcd that other tests share.
			var b [4]byte
			_, _ = rand.Read(b[:])
			sku := "lease-lost-" + tc.strategy + "-" + hex.EncodeToString(b[:])
			put(t, client, rep, sku, initial)
			lostBefore := leasesLost(t, client, rep, tc.strategy)

			type answer struct {
				status     int
				retryAfter string
				body       map[string]any
				err        error
			}
			answered := make(chan answer, 1)
			go func() {
				var a answer
				body := fmt.Sprintf(`{"qty":1,"strategy":%q}`, tc.strategy)
				resp, err := client.Post(rep.url+"/v1/items/"+sku+"/decrement", jsonCT, strings.NewReader(body))
				if err != nil {
					a.err = err
				} else {
					a.status, a.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
					a.err = json.NewDecoder(resp.Body).Decode(&a.body)
					resp.Body.Close()
				}
				answered <- a
			}()

			// Wait until the request is inside its critical section: it
			// holds the lease (healthz) and its fenced read has registered
			// the lease's token on the item, so it is past the read and
			// sleeping in the RMW delay. The deadline only keeps a broken
			// run from hanging.
			deadline := time.Now().Add(time.Minute)
			for {
				select {
				case a := <-answered:
					t.Fatalf("the decrement answered before it was seen in its critical section: %d %v %v", a.status, a.body, a.err)
				default:
				}
				var hz struct {
					LocksHeld map[string]int `json:"locks_held"`
				}
				getJSON(t, client, rep.url+"/healthz", &hz)
				var item stockapi.Item
				getJSON(t, client, rep.url+"/v1/items/"+sku, &item)
				if hz.LocksHeld[tc.strategy] == 1 && item.Fences[tc.strategy] > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the decrement was never seen in its critical section: locks_held %v, fences %v", hz.LocksHeld, item.Fences)
				}
				time.Sleep(20 * time.Millisecond)
			}

			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			tc.loseLease(t, ctx, strategy.LockKey(sku))

			// The watchdog's next renewal finds the lease gone and cancels
			// the request's critical section. Bounded by the client timeout.
			a := <-answered
			if a.err != nil {
				t.Fatalf("decrement: %v", a.err)
			}
			if a.status != http.StatusServiceUnavailable || a.body["error"] != "lease_lost" {
				t.Fatalf("decrement answered %d %v, want 503 lease_lost", a.status, a.body)
			}
			if a.body["sku"] != sku || a.body["strategy"] != tc.strategy || a.body["replica"] != rep.name {
				t.Errorf("the answer does not name the sku, strategy and replica: %v", a.body)
			}
			if a.retryAfter == "" {
				t.Errorf("lease_lost without Retry-After: nothing was written, a retry is safe")
			}

			// Nothing written: same stock, same version, no order.
			var item stockapi.Item
			getJSON(t, client, rep.url+"/v1/items/"+sku, &item)
			if item.Stock != initial || item.Version != 1 {
				t.Errorf("after lease_lost the item is stock %d version %d, want stock %d version 1 (untouched)", item.Stock, item.Version, initial)
			}
			var orders struct {
				Count  int               `json:"count"`
				Orders []inventory.Order `json:"orders"`
			}
			getJSON(t, client, rep.url+"/v1/items/"+sku+"/orders", &orders)
			if orders.Count != 0 || len(orders.Orders) != 0 {
				t.Errorf("after lease_lost the ledger has %d orders: %+v", orders.Count, orders.Orders)
			}

			if lost := leasesLost(t, client, rep, tc.strategy); lost != lostBefore+1 {
				t.Errorf("stock_leases_lost_total{strategy=%q} went from %v to %v, want one more", tc.strategy, lostBefore, lost)
			}
			// The lost lease is no longer counted as held. (The request
			// dropped it before answering.)
			var hz struct {
				LocksHeld map[string]int `json:"locks_held"`
			}
			getJSON(t, client, rep.url+"/healthz", &hz)
			if hz.LocksHeld[tc.strategy] != 0 {
				t.Errorf("after lease_lost healthz still counts %d %s leases held", hz.LocksHeld[tc.strategy], tc.strategy)
			}
		})
	}
}

// getJSON GETs url, requires a 200 and decodes the JSON answer into v.
func getJSON(t *testing.T, client *http.Client, url string, v any) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// leasesLost reads stock_leases_lost_total{strategy=...} from the replica's
// /metrics (Prometheus text format). A series not exported yet counts as 0.
func leasesLost(t *testing.T, client *http.Client, rep replica, strategy string) float64 {
	t.Helper()
	resp, err := client.Get(rep.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	text := buf.String()
	series := `stock_leases_lost_total{strategy="` + strategy + `"} `
	for line := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("/metrics: %q: %v", line, err)
			}
			return n
		}
	}
	// The other strategies' series exist from the start: a metric missing
	// altogether is a renamed or unregistered counter, not a zero.
	if !strings.Contains(text, "# TYPE stock_leases_lost_total counter") {
		t.Fatalf("/metrics does not export stock_leases_lost_total:\n%s", text)
	}
	return 0
}
