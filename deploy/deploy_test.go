// Package deploy_test checks the observability profile's files against a
// real Prometheus: the configuration passes promtool, and every query of
// every dashboard panel returns at least one series once Prometheus has
// scraped two replicas under a short load.
package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stocklock/stocklock/services/stock/server/servertest"

	"go.yaml.in/yaml/v3"

	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
	"github.com/stocklock/stocklock/internal/freeport"
	"github.com/stocklock/stocklock/internal/testskip"
	"github.com/stocklock/stocklock/services/stock/server"
)

const (
	promConfig = "prometheus/prometheus.yml"
	dashboard  = "grafana/dashboards/stocklock.json"
	adminToken = "deploy-test-admin-token"
)

// tool returns the path of a Prometheus binary, or skips: .ci/run installs
// Debian's prometheus package, which has both.
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		testskip.Missing(t, testskip.Prometheus, fmt.Sprintf("%s not on PATH: %v", name, err))
	}
	return p
}

func TestPromtoolCheckConfig(t *testing.T) {
	out, err := exec.Command(tool(t, "promtool"), "check", "config", promConfig).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check config %s: %v\n%s", promConfig, err, out)
	}
}

// panel is the part of a Grafana panel the test reads.
type panel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

func readPanels(t *testing.T) []panel {
	t.Helper()
	b, err := os.ReadFile(dashboard)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string  `json:"uid"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboard, err)
	}
	if d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: no uid or no panels", dashboard)
	}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
	}
	return d.Panels
}

// TestDashboardQueries starts two replicas and a Prometheus scraping them
// every second, sells through every safe strategy (one idempotent replay
// included), and runs every panel's query. redis-stock's panels must cover
// every stock_redis_stock_* metric a replica exports, and show what was
// sold: 12 units of 100, nothing left between Redis and MongoDB.
func TestDashboardQueries(t *testing.T) {
	testskip.Long(t, "starts MongoDB, Redis, etcd, two replicas and Prometheus")
	prom := tool(t, "prometheus")
	panels := readPanels(t)
	reps := startReplicas(t)
	promURL := startPrometheus(t, prom, reps)
	load(t, reps)

	// Every rate() needs two samples in its window; wait for three scrapes.
	waitFor(t, promURL, `count_over_time(up{job="stock"}[1m]) >= 3`, 2)
	for _, p := range panels {
		for _, target := range p.Targets {
			n, err := series(promURL, target.Expr)
			if err != nil || n == 0 {
				t.Errorf("panel %q: %s: %d series, %v", p.Title, target.Expr, n, err)
			}
		}
	}

	for _, name := range exported(t, reps[0], "stock_redis_stock_") {
		word := regexp.MustCompile(`\b` + name + `\b`)
		shown := false
		for _, p := range panels {
			for _, tg := range p.Targets {
				shown = shown || word.MatchString(tg.Expr)
			}
		}
		if !shown {
			t.Errorf("no panel of %s shows %s, which the replicas export", dashboard, name)
		}
	}
	for _, expr := range []string{
		`max(stock_redis_stock_units{sku="dash-redis"}) == 88`,
		`max(stock_redis_stock_item_units{sku="dash-redis"}) == 88`,
		`max(stock_redis_stock_unwritten_units{sku="dash-redis"}) == 0`,
		`sum(stock_redis_stock_reloads_total{reason="first_load"}) >= 1`,
	} {
		waitFor(t, promURL, expr, 1)
	}
}

// exported returns the names of the metric families with prefix that the
// replica at base exports.
func exported(t *testing.T, base, prefix string) []string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" && strings.HasPrefix(f[2], prefix) {
			names = append(names, f[2])
		}
	}
	if len(names) == 0 {
		t.Fatalf("%s/metrics exports no %s* metric", base, prefix)
	}
	return names
}

// startReplicas starts two replicas on one database, with every strategy
// but the demo ones, and returns their base URLs.
func startReplicas(t *testing.T) []string {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	mg := devstoretest.Mongo(t)
	rd := devstoretest.Redis(t)
	etcd := devstoretest.Etcd(t)
	// After the stores: the first to start on a cold build cache waits
	// minutes for devstored to build.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var urls []string
	for _, id := range []string{"deploy-a", "deploy-b"} {
		cfg := server.DefaultConfig()
		cfg.MongoURI, cfg.RedisAddr, cfg.EtcdEndpoints = mg.URI, rd.Addr, etcd.Endpoints
		cfg.DB, cfg.Replica, cfg.AdminToken = "deploy_test", id, adminToken
		cfg.LockTTL, cfg.LogLevel = time.Second, "warn"
		urls = append(urls, servertest.Start(t, ctx, cfg, logger.With("replica", id)))
	}
	return urls
}

// startPrometheus runs prom with the profile's configuration, its targets
// replaced by reps and its interval by one second, and returns its URL.
func startPrometheus(t *testing.T, prom string, reps []string) string {
	t.Helper()
	b, err := os.ReadFile(promConfig)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, r := range reps {
		targets = append(targets, strings.TrimPrefix(r, "http://"))
	}
	cfg["global"] = map[string]any{"scrape_interval": "1s", "evaluation_interval": "1s"}
	jobs, _ := cfg["scrape_configs"].([]any)
	if len(jobs) != 1 {
		t.Fatalf("%s: %d scrape jobs, want the stock job only", promConfig, len(jobs))
	}
	job := jobs[0].(map[string]any)
	job["static_configs"] = []any{map[string]any{"targets": targets}}
	dir := t.TempDir()
	file := filepath.Join(dir, "prometheus.yml")
	out, _ := yaml.Marshal(cfg)
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd := exec.Command(prom, "--config.file="+file, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = &syncWriter{w: &logs}, &syncWriter{w: &logs}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", logs.String())
		}
	})
	u := "http://" + addr
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(u + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return u
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after 30s:\n%s", logs.String())
		}
	}
}

// load sells through every safe strategy on both replicas, and replays one
// idempotent request.
func load(t *testing.T, reps []string) {
	t.Helper()
	var do func(method, u, body string, header ...string) int
	var tries atomic.Int64
	do = func(method, u, body string, header ...string) int {
		req, _ := http.NewRequest(method, u, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+adminToken)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		// A burst of sales meets the replicas' admission: 503 overloaded
		// changed nothing, and is sent again after its Retry-After, as the
		// contract allows (docs/overload.md).
		if resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(b), `"overloaded"`) && tries.Add(1) < 200 {
			wait, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			if err != nil || wait < 1 {
				t.Errorf("503 overloaded with Retry-After %q: want whole seconds", resp.Header.Get("Retry-After"))
				return resp.StatusCode
			}
			time.Sleep(time.Duration(wait) * time.Second)
			return do(method, u, body, header...)
		}
		return resp.StatusCode
	}
	if code := do(http.MethodPut, reps[0]+"/v1/items/dash", `{"stock":1000}`); code != http.StatusOK {
		t.Fatalf("PUT: %d", code)
	}
	var wg sync.WaitGroup
	for i, strategy := range []string{"mongo-lease", "redis-lock", "etcd-lock", "optimistic", "atomic"} {
		for j := range 6 {
			wg.Go(func() {
				do(http.MethodPost, reps[(i+j)%2]+"/v1/items/dash/decrement", fmt.Sprintf(`{"qty":1,"strategy":%q}`, strategy))
			})
		}
	}
	// redis-stock on a sku of its own, so that its copy and the item are
	// known: 12 sold of 100.
	if code := do(http.MethodPut, reps[0]+"/v1/items/dash-redis", `{"stock":100}`); code != http.StatusOK {
		t.Fatalf("PUT: %d", code)
	}
	for j := range 12 {
		wg.Go(func() {
			if code := do(http.MethodPost, reps[j%2]+"/v1/items/dash-redis/decrement", `{"qty":1,"strategy":"redis-stock"}`); code != http.StatusOK {
				t.Errorf("redis-stock decrement: %d", code)
			}
		})
	}
	wg.Wait()
	for _, rep := range reps {
		if code := do(http.MethodPost, rep+"/v1/items/dash/decrement", `{"qty":1,"strategy":"atomic"}`, "Idempotency-Key", "dash-replay"); code != http.StatusOK {
			t.Fatalf("idempotent decrement: %d", code)
		}
	}
}

// series runs an instant query and returns the number of series.
func series(promURL, expr string) (int, error) {
	resp, err := http.Get(promURL + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, err
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("query failed: %s", r.Error)
	}
	return len(r.Data.Result), nil
}

// waitFor polls expr until it has at least n series.
func waitFor(t *testing.T, promURL, expr string, n int) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		if got, err := series(promURL, expr); err == nil && got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: fewer than %d series after 60s", expr, n)
		}
	}
}

// syncWriter serialises the writes of a process's stdout and stderr.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
