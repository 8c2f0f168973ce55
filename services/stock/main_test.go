package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory/mongostore"

	"github.com/stocklock/stocklock/pkg/strategy"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
	"github.com/stocklock/stocklock/internal/freeport"
	"github.com/stocklock/stocklock/internal/testskip"
	"github.com/stocklock/stocklock/pkg/inventory"
)

// TestSIGTERMUnderLoad builds the service, starts it as a process, and
// sends it SIGTERM while decrements are between their reads and writes:
// the process must exit 0 after answering them, and every acknowledged sale
// must be in the ledger, with units taken equal to orders.
func TestSIGTERMUnderLoad(t *testing.T) {
	testskip.Long(t, "builds the service and starts MongoDB and Redis")
	bin := filepath.Join(t.TempDir(), "stock")
	// The Dockerfile's build mode (as in loadtest's tests): its compiled
	// packages are shared with .ci/run and TestDockerfileBuilds.
	build := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	mg, rd := devstoretest.Mongo(t), devstoretest.Redis(t)
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	const token = "sigterm-test-admin-token"
	var logs bytes.Buffer
	cmd := exec.Command(bin, "--demo", "--rmw-delay", "300ms", "--log-format", "text", "--shutdown-timeout", "1ms")
	cmd.Env = append(os.Environ(), "STOCK_ADDR="+addr, "MONGO_URI="+mg.URI, "REDIS_ADDR="+rd.Addr,
		"MONGO_DB=sigterm_test", "REPLICA_ID=stopping", "ADMIN_TOKEN="+token)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("replica log:\n%s", logs.String())
		}
	})
	base := "http://" + addr
	waitReady(t, base)

	strategies := []string{strategy.RedisLock, strategy.Atomic, strategy.Optimistic}
	for _, st := range strategies {
		req, _ := http.NewRequest(http.MethodPut, base+"/v1/items/term-"+st, bytes.NewBufferString(`{"stock":50}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
			t.Fatalf("PUT: %v %v", resp, err)
		} else {
			resp.Body.Close()
		}
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		acked = map[string]map[string]bool{}
		codes = map[int]int{}
	)
	for i := range 24 {
		st := strategies[i%len(strategies)]
		wg.Go(func() {
			resp, err := http.Post(base+"/v1/items/term-"+st+"/decrement", "application/json", bytes.NewBufferString(fmt.Sprintf(`{"qty":1,"strategy":%q}`, st)))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				codes[0]++
				return
			}
			defer resp.Body.Close()
			codes[resp.StatusCode]++
			var sale struct {
				OrderID string `json:"order_id"`
			}
			if resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(&sale) == nil {
				if acked[st] == nil {
					acked[st] = map[string]bool{}
				}
				acked[st][sale.OrderID] = true
			}
		})
	}
	time.Sleep(150 * time.Millisecond) // the decrements are inside their read-to-write delay
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("the replica exited with %v after SIGTERM, want 0", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the replica did not exit within 2 minutes of SIGTERM")
	}
	t.Logf("answers by status (0: no answer): %v", codes)
	if codes[200] == 0 {
		t.Fatal("no sale was acknowledged: SIGTERM came before any decrement was admitted")
	}

	store := readStore(t, mg.URI)
	for _, st := range strategies {
		sku := "term-" + st
		it, err := store.Get(t.Context(), sku)
		if err != nil {
			t.Fatal(err)
		}
		page, err := store.Orders(t.Context(), inventory.OrdersQuery{SKU: sku, Limit: inventory.MaxOrdersLimit})
		if err != nil {
			t.Fatal(err)
		}
		if taken := 50 - it.Stock; int64(len(page.Orders)) != taken || len(it.Pending) != 0 {
			t.Errorf("%s: %d units taken, %d orders, %d pending", sku, taken, len(page.Orders), len(it.Pending))
		}
		inLedger := map[string]bool{}
		for _, o := range page.Orders {
			inLedger[o.ID] = true
		}
		for id := range acked[st] {
			if !inLedger[id] {
				t.Errorf("%s: acknowledged order %s is not in the ledger", sku, id)
			}
		}
	}
}

func waitReady(t *testing.T, base string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica is not ready after 30s")
		}
	}
}

// readStore opens the replica's database directly, as an auditor would.
func readStore(t *testing.T, uri string) *mongostore.Store {
	t.Helper()
	c, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Disconnect(ctx)
	})
	s, err := mongostore.NewStore(c.Database("sigterm_test"), mongostore.StoreOptions{Replica: "auditor"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
