package report

import (
	"strings"
	"testing"

	"github.com/stocklock/stocklock/loadtest/verdict"
)

// TestFairness checks the share of the units won by the first arrivals.
func TestFairness(t *testing.T) {
	// 1,000 buyers: ranks 0-9 are the first 1%, 0-99 the first 10%.
	first1, first10, curve := Fairness(1000, map[int]int{0: 5, 9: 5, 10: 10, 99: 5, 100: 5, 999: 10})
	if first1 != 0.25 || first10 != 0.625 || curve[98] != 0.75 || curve[99] != 1 || len(curve) != 100 {
		t.Errorf("first 1%% %g, first 10%% %g, curve[98] %g, curve[99] %g (of %d); want 0.25, 0.625, 0.75, 1 (of 100)", first1, first10, curve[98], curve[99], len(curve))
	}
	// Fewer buyers than percents: the one buyer is the first 1%.
	if f1, _, _ := Fairness(1, map[int]int{0: 1}); f1 != 1 {
		t.Errorf("one buyer who won: first 1%% %g, want 1", f1)
	}
	if f1, f10, _ := Fairness(10, nil); f1 != 0 || f10 != 0 {
		t.Errorf("nothing won: %g, %g", f1, f10)
	}
}

// TestFlashThresholds checks that thresholds on flash metrics parse,
// judge a flash run, and leave a comparison's runs alone.
func TestFlashThresholds(t *testing.T) {
	r := FlashRun{Strategy: "atomic", Sold: 100, Goodput: 80, AnsweredShare: 0.9, Kinds: []FlashKind{{Kind: KindShed, Buyers: 3, Latency: FlashLatency{P99: 40}}}}
	for text, pass := range map[string]bool{"goodput>=50": true, "answered_share>=0.95": false, "shed_p99<30ms": false, "units_sold==100": true, "atomic:admin_p99<1s": true, "sell_out<5s": false} {
		th, err := ParseThreshold(text)
		if err != nil {
			t.Fatal(err)
		}
		c, ok := th.CheckFlash(r)
		if !ok || c.Pass != pass || c.Kind != verdict.Threshold {
			t.Errorf("%s on %+v: %v (applies %v), want pass %v", text, r, c, ok, pass)
		}
		if _, ok := th.Check(Run{Strategy: "atomic"}); ok {
			t.Errorf("%s applies to a comparison's run", text)
		}
	}
	if !strings.Contains(Metrics(), "goodput") {
		t.Errorf("Metrics lists no goodput:\n%s", Metrics())
	}
}

// TestPastKneeSection checks that the steps past the knee are tabled and
// drawn beside the sweep's, and stay out of the flash sale's table.
func TestPastKneeSection(t *testing.T) {
	rep := Report{Sections: []Section{CapacitySection, PastKneeSection}, Runs: []Run{
		{Strategy: "atomic", CapacityStep: 1, ReplicaCount: 2, TargetRate: 50, SalesPerSec: 49},
		{Strategy: "atomic", CapacityStep: 2, ReplicaCount: 2, TargetRate: 100, SalesPerSec: 70, Saturated: "behind"},
	}, Flash: []FlashRun{
		{Strategy: "atomic", Replicas: 2, Offered: 100, Goodput: 60, Patience: "500ms"},
		{Strategy: "atomic", Replicas: 2, Offered: 200, Goodput: 20, Patience: "500ms", Checks: []verdict.Check{{Name: "oversold", Pass: true}}},
	}}
	var text, svg strings.Builder
	writePastKnee(&text, rep, false)
	drawGoodput(&svg, rep)
	if !strings.Contains(text.String(), "Past the knee") || strings.Count(text.String(), "atomic") != 2 {
		t.Errorf("past-knee table:\n%s", text.String())
	}
	if strings.Count(svg.String(), "<polyline") != 2 || strings.Count(svg.String(), "<circle") != 4 || !strings.Contains(svg.String(), `stroke-dasharray="6,4"`) {
		t.Errorf("goodput chart: want the sweep solid and past the knee dashed, 4 points:\n%s", svg.String())
	}
	if got := rep.Checks(); len(got) != 1 || got[0].Scope != "past the knee · atomic, 2 replicas, 200 req/s" {
		t.Errorf("checks %+v", got)
	}
}

// TestFlashShedReasons: results.md names the replicas' shed requests by
// reason, once, for the runs that have them.
func TestFlashShedReasons(t *testing.T) {
	rep := Report{Flash: []FlashRun{
		{Strategy: "atomic", ShedReasons: map[string]int{"queue_wait": 2, "queue_full": 7}},
		{Strategy: "batched"},
		{Strategy: "redis-stock", ShedReasons: map[string]int{"queue_full": 3}},
	}}
	var md strings.Builder
	writeFlash(&md, rep, true)
	want := "Shed by the replicas, by reason (`stock_sales_shed_total`): atomic: queue_full 7, queue_wait 2; redis-stock: queue_full 3.\n"
	if strings.Count(md.String(), "Shed by the replicas") != 1 || !strings.Contains(md.String(), want) {
		t.Errorf("results.md lacks %q once:\n%s", want, md.String())
	}
}
