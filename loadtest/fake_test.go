package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stocklock/stocklock/loadtest/history"
	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/loadtest/verdict"
)

// fakeStore is an in-memory stand-in for the stock service's MongoDB,
// shared by fake replicas. Each strategy name selects a behaviour, so the
// harness's plumbing (bodies, ledger, metrics, exit status) can be tested
// without a database:
//
//   - atomic: correct, under a mutex;
//   - unsafe: read, sleep, write back, unlocked: a real race;
//   - redis-lock: correct, but every 4th request answers 503;
//   - mongo-lease: correct stock, but records every order twice;
//   - optimistic: correct stock and ledger, but answers a remaining one
//     too high: only the history can tell;
//   - etcd-lock: correct, but without an Idempotency-Key every 5th sale
//     answers 500 outcome_unknown after selling;
//   - atomic honours Idempotency-Key (a repeat replays the first sale);
//     every other strategy ignores it and sells again.
type fakeStore struct {
	mu      sync.Mutex
	stock   map[string]int
	orders  []map[string]any
	seq     int
	calls   int
	waits   int
	sales   map[string][]byte // idempotency key → the sale's answer (atomic)
	unknown int               // etcd-lock sales without a key
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
		key := r.Header.Get("Idempotency-Key")
		fail := func(code int, e string) {
			w.WriteHeader(code)
			json.NewEncoder(w).Encode(map[string]string{"error": e})
		}
		sell := func(remaining int) { // st.mu held
			st.seq++
			o := map[string]any{"order_id": fmt.Sprintf("o%d", st.seq), "sku": sku, "qty": in.Qty, "replica": id,
				"strategy": in.Strategy, "fence": 0, "at": time.Now().UTC(), "remaining": remaining}
			if key != "" {
				o["key"] = key
			}
			st.orders = append(st.orders, o)
			if in.Strategy == "mongo-lease" {
				st.orders = append(st.orders, o)
			}
			resp := map[string]any{}
			for k, v := range o {
				resp[k] = v
			}
			if in.Strategy == "optimistic" {
				resp["remaining"] = remaining + 1
			}
			b, _ := json.Marshal(resp)
			if key != "" && in.Strategy == "atomic" {
				st.sales[key] = b
			}
			w.Write(b)
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
			if b, ok := st.sales[key]; ok && key != "" && in.Strategy == "atomic" {
				w.Header().Set("Idempotent-Replayed", "true")
				w.Write(b)
				return
			}
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
			if in.Strategy == "etcd-lock" && key == "" {
				if st.unknown++; st.unknown%5 == 0 {
					// The sale is made and recorded; its answer says
					// only that the outcome is unknown.
					st.seq++
					st.orders = append(st.orders, map[string]any{"order_id": fmt.Sprintf("o%d", st.seq), "sku": sku, "qty": in.Qty,
						"replica": id, "strategy": in.Strategy, "fence": 0, "at": time.Now().UTC(), "remaining": n - in.Qty})
					fail(500, "outcome_unknown")
					return
				}
			}
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
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"status":"ok"}`)) })
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
	st := &fakeStore{stock: map[string]int{}, sales: map[string][]byte{}}
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
	code, out, stdout, stderr := runFakes(t,
		"--strategies", "unsafe,redis-lock,atomic",
		"--rate", "0", "--workers", "16", "--max-workers", "16", "--requests", "400",
		"--stock", "100", "--skus", "3", "--skew", "1.5", "--settle", "0s",
	)
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
	if us.Linearizable != "no" || len(us.Violations) == 0 || at.Linearizable != "yes" || rl.Linearizable != "yes" {
		t.Errorf("linearizable: unsafe %q (pictures %v), atomic %q, redis-lock %q", us.Linearizable, us.Violations, at.Linearizable, rl.Linearizable)
	}
	for _, f := range []string{report.MarkdownFile, report.ChartFile, "plot-unsafe.html", "plot-atomic.html", "history-unsafe.jsonl", "history-unsafe.html", "history-atomic.jsonl"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	if !strings.Contains(stdout.String(), "PASS") || !strings.Contains(stdout.String(), "lost upd") {
		t.Errorf("stdout:\n%s", stdout.String())
	}
	// report.html holds porcupine's picture of unsafe's violation, and
	// still reaches nothing outside itself.
	page, err := os.ReadFile(filepath.Join(out, report.HTMLFile))
	if err != nil || len(page) >= 2<<20 || !strings.Contains(string(page), `<iframe title="history-unsafe.html" srcdoc=`) {
		t.Errorf("report.html: %v, %d bytes, picture embedded %v", err, len(page), strings.Contains(string(page), "srcdoc="))
	}
	if refs := regexp.MustCompile(`(?i)\b(src|href)\s*=\s*["']?\s*(https?:|//)|<link\b|<script[^>]*\bsrc=`).FindAllString(string(page), -1); len(refs) > 0 {
		t.Errorf("report.html reaches outside itself: %q", refs)
	}
}

// TestHarnessThresholds: each threshold is checked on every run it
// applies to; a breach is a failed check with its own exit status and
// leaves the safety verdicts alone; a safety failure comes first.
func TestHarnessThresholds(t *testing.T) {
	load := []string{"--rate", "200", "--requests", "60", "--stock", "20", "--settle", "0s", "--warmup", "0s"}
	code, out, stdout, stderr := runFakes(t, append(load, "--strategies", "atomic,redis-lock",
		"--threshold", "redis-lock:unavailable==0", "--threshold", "atomic:sales_per_s>0,p99<1h")...)
	t.Logf("stdout:\n%s", stdout.String())
	if code != exitThreshold {
		t.Fatalf("exit %d, want %d (redis-lock's fake answers 503 to every 4th request)\n%s", code, exitThreshold, stderr.String())
	}
	rep := readReport(t, out)
	var got []string
	for _, c := range rep.Checks() {
		if c.Kind == verdict.Threshold {
			got = append(got, fmt.Sprintf("%s %s %s", c.Scope, c.Name, c.Result()))
		}
	}
	if want := []string{"atomic sales_per_s pass", "atomic p99 pass", "redis-lock unavailable breached", "redis-lock p99 pass"}; !slices.Equal(got, want) {
		t.Errorf("threshold checks %q, want %q", got, want)
	}
	for _, r := range rep.Runs {
		if r.Verdict != "pass" {
			t.Errorf("%s: verdict %s, want pass: a threshold is no safety check", r.Strategy, r.Verdict)
		}
	}
	md, _ := os.ReadFile(filepath.Join(out, report.MarkdownFile))
	if !strings.Contains(string(md), "**Result: BREACHED.**") || !strings.Contains(string(md), "| **breached** | threshold | unavailable | redis-lock |") {
		t.Errorf("results.md lacks the verdict or the breach in its check table:\n%s", md)
	}
	if !strings.Contains(stdout.String(), "BREACHED redis-lock: unavailable ") {
		t.Errorf("stdout does not name the breach")
	}
	page, _ := os.ReadFile(filepath.Join(out, report.HTMLFile))
	if !strings.Contains(string(page), "<td>breached</td><td>threshold</td><td>unavailable</td><td>redis-lock</td>") {
		t.Errorf("report.html lacks the breach in its check table")
	}

	code, _, stdout, stderr = runFakes(t, append(load, "--strategies", "mongo-lease", "--threshold", "p99<1ns")...)
	if code != exitAnomaly {
		t.Errorf("a safe strategy's ledger mismatch and a breach: exit %d, want %d\n%s\n%s", code, exitAnomaly, stdout.String(), stderr.String())
	}
}

func TestHarnessFailsOnLedgerMismatch(t *testing.T) {
	replicas := fakeReplicas(t)
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{
		"--replicas", strings.Join(replicas, ","), "--strategies", "mongo-lease",
		"--rate", "200", "--requests", "50", "--stock", "20", "--settle", "0s",
		"--out", t.TempDir(), "--quiet",
	}, envOf(), &stdout, &stderr)
	if code != exitAnomaly {
		t.Fatalf("a safe strategy whose ledger repeats orders must exit %d, got %d\n%s\n%s", exitAnomaly, code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "FAIL") || !strings.Contains(stdout.String(), "20 repeated ids in the ledger") {
		t.Errorf("stdout:\n%s", stdout.String())
	}
}

// TestHarnessFailsOnHistoryOnly: a safe strategy whose totals and ledger
// are right but whose answers could not all be true (each sale reports one
// unit more than it left) fails on its history alone.
func TestHarnessFailsOnHistoryOnly(t *testing.T) {
	code, out, stdout, stderr := runFakes(t,
		"--strategies", "optimistic",
		"--rate", "200", "--requests", "60", "--stock", "20", "--settle", "0s", "--warmup", "0s",
	)
	if code != exitAnomaly {
		t.Fatalf("exit %d, want %d\n%s\n%s", code, exitAnomaly, stdout.String(), stderr.String())
	}
	r := readReport(t, out).Runs[0]
	if r.Oversold != 0 || r.LostUpdates != 0 || r.LedgerMismatch != 0 {
		t.Fatalf("the totals should be clean: %+v", r)
	}
	if r.Linearizable != "no" || r.Verdict != "FAIL" || len(r.Conflicts) == 0 {
		t.Errorf("linearizable %q, verdict %q, conflicts %v", r.Linearizable, r.Verdict, r.Conflicts)
	}
	md, _ := os.ReadFile(filepath.Join(out, report.MarkdownFile))
	if !strings.Contains(string(md), "[no]("+r.Violations[0]+")") {
		t.Errorf("results.md does not link the picture %v:\n%s", r.Violations, md)
	}
}

// TestHarnessRetries re-sends the answers a proxy cut, with the same key:
// atomic replays the first sale and stays clean; etcd-lock (in the fakes)
// ignores the key, sells again, and fails on the units sold twice.
func TestHarnessRetries(t *testing.T) {
	code, out, stdout, stderr := runFakes(t,
		"--strategies", "atomic,etcd-lock",
		"--retries", "3", "--cut-rate", "0.3", "--attempt-timeout", "2s",
		"--rate", "200", "--requests", "100", "--stock", "60", "--settle", "0s", "--warmup", "0s",
	)
	t.Logf("stdout:\n%s", stdout.String())
	if code != exitAnomaly {
		t.Fatalf("exit %d, want %d (etcd-lock sells twice)\n%s", code, exitAnomaly, stderr.String())
	}
	runs := byStrategy(ptr(readReport(t, out)))
	at, el := runs["atomic"], runs["etcd-lock"]
	if at.Cuts == 0 || at.Resent == 0 || at.DoubleSold != 0 || at.Linearizable != "yes" || at.Verdict != "pass" {
		t.Errorf("atomic: cuts %d, resent %d, double sold %d, linearizable %q, verdict %q; %v", at.Cuts, at.Resent, at.DoubleSold, at.Linearizable, at.Verdict, at.Problems)
	}
	if el.Cuts == 0 || el.DoubleSold == 0 || el.Verdict != "FAIL" || el.Linearizable != "no" {
		t.Errorf("etcd-lock: cuts %d, double sold %d, linearizable %q, verdict %q", el.Cuts, el.DoubleSold, el.Linearizable, el.Verdict)
	}
}

// TestHarnessOutcomeUnknown: a 500 outcome_unknown may have sold, like a
// lost answer; the order it made in the ledger is not a mismatch.
func TestHarnessOutcomeUnknown(t *testing.T) {
	code, out, stdout, stderr := runFakes(t,
		"--strategies", "etcd-lock",
		"--rate", "200", "--requests", "40", "--stock", "60", "--settle", "0s", "--warmup", "0s",
	)
	t.Logf("stdout:\n%s", stdout.String())
	r := byStrategy(ptr(readReport(t, out)))["etcd-lock"]
	if code != exitOK || r.LedgerMismatch != 0 || r.Other == 0 || r.Verdict != "pass" {
		t.Fatalf("exit %d: other %d, ledger mismatch %d, verdict %q, problems %v; want a pass that excuses the unknown outcomes\n%s",
			code, r.Other, r.LedgerMismatch, r.Verdict, r.Problems, stderr.String())
	}
}

// TestHarnessMixed runs two strategies at once on one sku: one run, judged
// on the shared sku.
func TestHarnessMixed(t *testing.T) {
	code, out, stdout, stderr := runFakes(t,
		"--strategies", "atomic,redis-lock", "--mixed",
		"--rate", "0", "--workers", "8", "--max-workers", "8", "--requests", "200", "--stock", "80", "--settle", "0s", "--warmup", "0s",
	)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	}
	rep := readReport(t, out)
	if len(rep.Runs) != 1 {
		t.Fatalf("%d runs, want the one mixed run", len(rep.Runs))
	}
	r := rep.Runs[0]
	if r.Strategy != "mixed" || !r.Safe || r.Linearizable != "yes" || r.Sold != 80 || r.Unavailable == 0 {
		t.Errorf("mixed run: %+v", r)
	}
	if r.Outcomes["redis-lock"]["refused lock_unavailable"] == 0 || r.Outcomes["atomic"]["sold"] == 0 {
		t.Errorf("outcomes by strategy: %v", r.Outcomes)
	}
	md, _ := os.ReadFile(filepath.Join(out, report.MarkdownFile))
	if !strings.Contains(string(md), "requests by strategy and outcome") {
		t.Errorf("results.md has no table of the mixed run's outcomes")
	}
	f, err := os.Open(filepath.Join(out, r.History))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ops, err := history.ReadJSONL(f)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]int{}
	for _, op := range ops {
		by[op.Strategy+" "+op.Target]++
	}
	if len(rep.Replicas) < 2 {
		t.Fatalf("the report names replicas %v, want the fakes", rep.Replicas)
	}
	for _, s := range []string{"atomic", "redis-lock"} {
		for _, base := range rep.Replicas {
			if by[s+" "+base] == 0 {
				t.Errorf("no %s request through %s: %v", s, base, by)
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestHarnessUnreachableReplica(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close() // nothing listens there any more
	var stdout, stderr bytes.Buffer
	ctx := t.Context()
	start := time.Now()
	code := run(ctx, []string{"--replicas", srv.URL, "--strategies", "atomic", "--requests", "5", "--ready-timeout", "1s", "--out", t.TempDir()}, envOf(), &stdout, &stderr)
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

// runFakes runs the harness with args against fresh fake replicas, quiet,
// into a fresh output directory, and returns the exit status, the
// directory and what it printed.
func runFakes(t *testing.T, args ...string) (code int, out string, stdout, stderr *bytes.Buffer) {
	t.Helper()
	out = t.TempDir()
	stdout, stderr = &bytes.Buffer{}, &bytes.Buffer{}
	args = append([]string{"--replicas", strings.Join(fakeReplicas(t), ",")}, args...)
	code = run(t.Context(), append(args, "--out", out, "--quiet"), envOf(), stdout, stderr)
	return code, out, stdout, stderr
}
