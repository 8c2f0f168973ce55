package harness

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stocklock/stocklock/loadtest/report"
)

// saleStepText is a /metrics text with one sale step histogram series per
// (strategy, step, sum, count), buckets left out but +Inf.
func saleStepText(series ...any) string {
	var b strings.Builder
	b.WriteString("# HELP stock_sale_step_seconds Time of each step.\n# TYPE stock_sale_step_seconds histogram\n")
	for i := 0; i+3 < len(series); i += 4 {
		st, step, sum, n := series[i], series[i+1], series[i+2], series[i+3]
		fmt.Fprintf(&b, "stock_sale_step_seconds_bucket{step=%q,strategy=%q,le=\"+Inf\"} %v\n", step, st, n)
		fmt.Fprintf(&b, "stock_sale_step_seconds_sum{step=%q,strategy=%q} %v\n", step, st, sum)
		fmt.Fprintf(&b, "stock_sale_step_seconds_count{step=%q,strategy=%q} %v\n", step, st, n)
	}
	b.WriteString("# TYPE stock_requests_total counter\nstock_requests_total 3\n")
	return b.String()
}

func TestSaleStepMeans(t *testing.T) {
	before := parseSaleSteps([]byte(saleStepText(
		"redis-lock", "lock", 1.0, 100, "redis-lock", "read", 0.1, 100, "redis-lock", "write", 0.1, 100, "redis-lock", "release", 0.1, 100,
	)))
	// Over the window replica a makes as many sales again, and replica b,
	// from nothing, as many: the means are over both (want, below).
	afterA := parseSaleSteps([]byte(saleStepText(
		"redis-lock", "lock", 3.0, 200, "redis-lock", "read", 0.2, 200, "redis-lock", "write", 0.3, 200, "redis-lock", "release", 0.2, 200,
		"mongo-lease", "read", 0.5, 10,
	)))
	afterB := parseSaleSteps([]byte(saleStepText(
		"redis-lock", "read", 0.3, 100, "redis-lock", "write", 0.2, 100, "redis-lock", "release", 0.1, 100,
	)))
	means := stepMeans([]stepTotals{before, nil}, []stepTotals{afterA, afterB}, "redis-lock")
	want := map[string]float64{"lock": 20, "read": 2, "write": 2, "release": 1}
	if len(means) != len(want) {
		t.Fatalf("means = %v, want %v", means, want)
	}
	for step, ms := range want {
		if math.Abs(means[step]-ms) > 1e-9 {
			t.Fatalf("means = %v, want %v", means, want)
		}
	}
	run := report.Run{Strategy: "redis-lock"}
	saleBound(&run, []stepTotals{before, nil}, []stepTotals{afterA, afterB})
	if run.BoundPerSec == nil || math.Abs(*run.BoundPerSec-200) > 1e-9 {
		t.Fatalf("bound = %v, want one second over the sum of read, write and release", run.BoundPerSec)
	}
	// Nothing observed over the window, or a strategy without a lock: no bound.
	run = report.Run{Strategy: "redis-lock"}
	saleBound(&run, []stepTotals{afterA, afterB}, []stepTotals{afterA, afterB})
	if run.BoundPerSec != nil || run.StepMs != nil {
		t.Fatalf("a window without sales has a bound: %+v", run)
	}
	run = report.Run{Strategy: "atomic"}
	saleBound(&run, []stepTotals{before, nil}, []stepTotals{afterA, afterB})
	if run.BoundPerSec != nil {
		t.Fatal("atomic has a bound")
	}
	if parseSaleSteps([]byte("stock_requests_total 3\n")) != nil {
		t.Fatal("a text without sale steps parsed to something")
	}
}

// TestSaleBoundOneHotSKU: over several skus the locks do not serialise
// every sale, so no bound is set; the step times still are.
func TestSaleBoundOneHotSKU(t *testing.T) {
	before := []stepTotals{{"redis-lock": {"read": {sum: 0, count: 0}}}}
	after := []stepTotals{{"redis-lock": {"read": {sum: 0.002, count: 1}, "write": {sum: 0.002, count: 1}, "release": {sum: 0.001, count: 1}}}}
	run := report.Run{Strategy: "redis-lock", SKUs: []string{"a", "b"}}
	saleBound(&run, before, after)
	if run.BoundPerSec != nil || run.StepMs == nil {
		t.Errorf("two skus: bound %v, step times %v; want no bound, the step times", run.BoundPerSec, run.StepMs)
	}
	run = report.Run{Strategy: "redis-lock", SKUs: []string{"a"}}
	saleBound(&run, before, after)
	if run.BoundPerSec == nil {
		t.Error("one hot sku: no bound")
	}
}
