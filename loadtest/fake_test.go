package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stocklock/stocklock/loadtest/report"
)

// fakeStore is an in-memory stand-in for the stock service's MongoDB,
// shared by fake replicas. Each strategy name selects a behaviour, so the
// harness's plumbing (bodies, ledger, metrics, exit status) can be tested
// without a database:
//
//   - atomic: correct, under a mutex;
//   - unsafe: read, sleep, write back, unlocked: a real race;
//   - redis-lock: correct, but every 4th request answers 503;
//   - mongo-lease: correct stock, but records every order twice.
type fakeStore struct {
	mu     sync.Mutex
	stock  map[string]int
	orders []map[string]any
	seq    int
	calls  int
	waits  int
}

func newFakeReplica(t *testing.T, st *fakeStore, id string) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/items/{sku}", func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Stock int }
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		st.mu.Lock()
		st.stock[r.PathValue("sku")] = in.Stock
		st.mu.Unlock()
		json.NewEncoder(w).Encode(map[string]any{"sku": r.PathValue("sku"), "stock": in.Stock})
	})
	mux.HandleFunc("GET /v1/items/{sku}", func(w http.ResponseWriter, r *http.Request) {
		st.mu.Lock()
		n, ok := st.stock[r.PathValue("sku")]
		st.mu.Unlock()
		if !ok {
			w.WriteHeader(404)
			json.NewEncoder(w).Encode(map[string]string{"error": "not_found"})
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"sku": r.PathValue("sku"), "stock": n, "version": 1})
	})
	mux.HandleFunc("POST /v1/items/{sku}/decrement", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Qty      int
			Strategy string
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		sku := r.PathValue("sku")
		fail := func(code int, e string) {
			w.WriteHeader(code)
			json.NewEncoder(w).Encode(map[string]string{"error": e})
		}
		sell := func(remaining int) { // st.mu held
			st.seq++
			o := map[string]any{"order_id": fmt.Sprintf("o%d", st.seq), "sku": sku, "qty": in.Qty, "replica": id,
				"strategy": in.Strategy, "fence": 0, "at": time.Now().UTC()}
			st.orders = append(st.orders, o)
			if in.Strategy == "mongo-lease" {
				st.orders = append(st.orders, o)
			}
			resp := map[string]any{}
			for k, v := range o {
				resp[k] = v
			}
			resp["remaining"] = remaining
			json.NewEncoder(w).Encode(resp)
		}
		switch in.Strategy {
		case "unsafe":
			st.mu.Lock()
			n := st.stock[sku]
			st.mu.Unlock()
			if n < in.Qty {
				fail(409, "sold_out")
				return
			}
			time.Sleep(5 * time.Millisecond)
			st.mu.Lock()
			st.stock[sku] = n - in.Qty
			sell(n - in.Qty)
			st.mu.Unlock()
		default:
			st.mu.Lock()
			defer st.mu.Unlock()
			if in.Strategy == "redis-lock" {
				st.waits++
				st.calls++
				if st.calls%4 == 0 {
					fail(503, "lock_unavailable")
					return
				}
			}
			n := st.stock[sku]
			if n < in.Qty {
				fail(409, "sold_out")
				return
			}
			st.stock[sku] = n - in.Qty
			sell(n - in.Qty)
		}
	})
	mux.HandleFunc("GET /v1/items/{sku}/orders", func(w http.ResponseWriter, r *http.Request) {
		since, err := time.Parse(time.RFC3339Nano, r.URL.Query().Get("since"))
		if err != nil {
			http.Error(w, "bad since", 400)
			return
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		out := []map[string]any{}
		for _, o := range st.orders {
			if o["sku"] == r.PathValue("sku") && !o["at"].(time.Time).Before(since) {
				out = append(out, o)
			}
		}
		json.NewEncoder(w).Encode(map[string]any{"sku": r.PathValue("sku"), "orders": out})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		st.mu.Lock()
		n := st.waits
		st.mu.Unlock()
		fmt.Fprintf(w, "# TYPE stock_lock_wait_seconds histogram\n")
		fmt.Fprintf(w, "stock_lock_wait_seconds_bucket{strategy=\"redis-lock\",le=\"0.005\"} %d\n", n)
		fmt.Fprintf(w, "stock_lock_wait_seconds_bucket{strategy=\"redis-lock\",le=\"+Inf\"} %d\n", n)
		fmt.Fprintf(w, "stock_lock_wait_seconds_sum{strategy=\"redis-lock\"} 0\nstock_lock_wait_seconds_count{strategy=\"redis-lock\"} %d\n", n)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func fakeReplicas(t *testing.T) []string {
	st := &fakeStore{stock: map[string]int{}}
	return []string{newFakeReplica(t, st, "a").URL, newFakeReplica(t, st, "b").URL}
}

func byStrategy(rep *report.Report) map[string]report.Run {
	m := map[string]report.Run{}
	for _, r := range rep.Runs {
		m[r.Strategy] = r
	}
	return m
}

func TestHarnessAgainstFakes(t *testing.T) {
	replicas := fakeReplicas(t)
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{
		"--replicas", strings.Join(replicas, ","),
		"--strategies", "unsafe,redis-lock,atomic",
		"--rate", "0", "--workers", "16", "--max-workers", "16", "--requests", "400",
		"--stock", "100", "--skus", "3", "--skew", "1.5", "--settle", "0s",
		"--out", out, "--quiet",
	}, env(), &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	rep := readReport(t, out)
	runs := byStrategy(&rep)

	at := runs["atomic"]
	if at.Requests != 400 || at.Sold+at.Remaining != 300 || at.Sold+at.SoldOut != 400 || at.Verdict != "pass" {
		t.Errorf("atomic: %+v", at)
	}
	if len(at.ByReplica) != 2 {
		t.Errorf("requests must alternate across both replicas: %v", at.ByReplica)
	}

	rl := runs["redis-lock"]
	if rl.Unavailable != 100 || rl.Verdict != "pass" || rl.Errors() != 0 {
		t.Errorf("redis-lock: 503s must be counted, and are no anomaly: %+v", rl)
	}
	if rl.LockWaitP99 == nil || *rl.LockWaitP99 <= 0 || *rl.LockWaitP99 > 5 {
		t.Errorf("redis-lock lock wait p99: %v", rl.LockWaitP99)
	}
	if at.LockWaitP99 != nil {
		t.Errorf("atomic takes no lock, but has lock wait %v", *at.LockWaitP99)
	}

	us := runs["unsafe"]
	if us.LostUpdates == 0 || us.Verdict != "demonstrated" {
		t.Errorf("unsafe with 16 concurrent requests and a 5ms window must lose updates: %+v", us)
	}
	for _, f := range []string{report.MarkdownFile, report.ChartFile, "plot-unsafe.html", "plot-atomic.html"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	if !strings.Contains(stdout.String(), "PASS") || !strings.Contains(stdout.String(), "lost upd") {
		t.Errorf("stdout:\n%s", stdout.String())
	}
}

func TestHarnessFailsOnLedgerMismatch(t *testing.T) {
	replicas := fakeReplicas(t)
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{
		"--replicas", strings.Join(replicas, ","), "--strategies", "mongo-lease",
		"--rate", "200", "--requests", "50", "--stock", "20", "--settle", "0s",
		"--out", t.TempDir(), "--quiet",
	}, env(), &stdout, &stderr)
	if code != exitAnomaly {
		t.Fatalf("a safe strategy whose ledger repeats orders must exit %d, got %d\n%s\n%s", exitAnomaly, code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "FAIL") || !strings.Contains(stdout.String(), "20 repeated ids in the ledger") {
		t.Errorf("stdout:\n%s", stdout.String())
	}
}

func TestHarnessUnreachableReplica(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close() // nothing listens there any more
	var stdout, stderr bytes.Buffer
	ctx := t.Context()
	start := time.Now()
	code := run(ctx, []string{"--replicas", srv.URL, "--strategies", "atomic", "--requests", "5", "--ready-timeout", "1s", "--out", t.TempDir()}, env(), &stdout, &stderr)
	if code != exitError {
		t.Fatalf("exit %d, want %d", code, exitError)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("took %s", time.Since(start))
	}
	if !strings.Contains(stderr.String(), "not ready") {
		t.Errorf("stderr: %s", stderr.String())
	}
}
