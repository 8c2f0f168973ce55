package teststrategy_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stocklock/stocklock/internal/teststrategy"
	"github.com/stocklock/stocklock/loadtest/env/envtest"
	"github.com/stocklock/stocklock/loadtest/harness"
	"github.com/stocklock/stocklock/loadtest/live"
	"github.com/stocklock/stocklock/pkg/strategy"
)

const adminToken = "teststrategy-admin-token"

// TestTestOnlyStrategy: a lock strategy that only this package registers
// (one registry entry, one lock-service entry) is served by two replicas,
// raced by the harness across both, judged safe by the verdict, and
// offered by the live page, with no other file naming it.
func TestTestOnlyStrategy(t *testing.T) {
	if !strategy.Known(teststrategy.Name) || !slices.Contains(strategy.Using(teststrategy.Lock), teststrategy.Name) {
		t.Fatalf("%s on %s is not in the registry", teststrategy.Name, teststrategy.Lock)
	}
	replicas := envtest.Replicas(t, adminToken, 10*time.Millisecond)

	// Served by a replica: its lock metrics carry the strategy.
	resp, err := http.Get(replicas[0] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `stock_lock_grants_total{strategy="`+teststrategy.Name+`"}`) {
		t.Errorf("replica a's /metrics has no lock grants series of %s", teststrategy.Name)
	}

	// Raced by the harness and judged by the verdict.
	cfg := harness.DefaultConfig()
	cfg.Replicas, cfg.Strategies = replicas, []string{teststrategy.Name}
	cfg.Rate, cfg.Workers, cfg.MaxWorkers, cfg.Requests, cfg.Duration = 0, 8, 8, 80, 0
	cfg.Stock, cfg.Warmup, cfg.Settle, cfg.AdminToken, cfg.Quiet = 40, 0, 100*time.Millisecond, adminToken, true
	cfg.OutDir = t.TempDir()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	rep, err := harness.New(cfg, nil).Run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 1 {
		t.Fatalf("%d runs, want 1", len(rep.Runs))
	}
	r := rep.Runs[0]
	t.Logf("%s: sold %d of %d, by replica %v, verdict %q, linearizable %q", r.Strategy, r.Sold, r.Initial, r.ByReplica, r.Verdict, r.Linearizable)
	if r.Strategy != teststrategy.Name || r.Sold == 0 || r.Orders != r.Sold {
		t.Errorf("run of %q: sold %d, orders %d: want sales of %s, each a 200 with its order", r.Strategy, r.Sold, r.Orders, teststrategy.Name)
	}
	if r.Oversold != 0 || r.LostUpdates != 0 || r.LedgerMismatch != 0 || r.Verdict != "pass" || r.Linearizable != "yes" {
		t.Errorf("%s: verdict %q, linearizable %q, oversold %d, lost updates %d, ledger mismatch %d: a safe lock strategy must pass",
			r.Strategy, r.Verdict, r.Linearizable, r.Oversold, r.LostUpdates, r.LedgerMismatch)
	}

	// Offered by the live page.
	page, err := live.Start(t.Context(), live.Options{Base: cfg, OutDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(page.Close)
	ts := httptest.NewServer(page.Handler())
	t.Cleanup(ts.Close)
	resp, err = http.Get(ts.URL + "/api/state")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	type offered struct {
		Name string `json:"name"`
		Safe bool   `json:"safe"`
		Lock string `json:"lock"`
	}
	var state struct {
		Strategies []offered `json:"strategies"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&state); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(state.Strategies, func(s offered) bool { return s.Name == teststrategy.Name })
	if i < 0 || !state.Strategies[i].Safe || state.Strategies[i].Lock != teststrategy.Lock {
		t.Errorf("the page offers %+v: want %s, safe, on lock service %s", state.Strategies, teststrategy.Name, teststrategy.Lock)
	}
}
