package harness

import (
	"testing"
	"time"

	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/loadtest/verdict"
)

// TestLimits: a capacity step's limits are checks of their own kind; the
// first it fails says how the step passed them, and none fails the run.
func TestLimits(t *testing.T) {
	c := Capacity{P99: 500 * time.Millisecond, Errors: 0.01}
	within := report.Run{Requests: 400, TargetRate: 200, SalesPerSec: 199, Latency: report.Latency{P99: 80}}
	if past := limits(&within, c); past != "" || len(within.Checks) != 4 {
		t.Errorf("a step within the limits: %q, checks %+v", past, within.Checks)
	}
	slow := report.Run{Requests: 400, TargetRate: 400, SalesPerSec: 150, Unavailable: 20, Latency: report.Latency{P99: 841}}
	if past := limits(&slow, c); past != "p99 841ms over 500ms" {
		t.Errorf("a slow step: %q, want the p99 first", past)
	}
	failed := 0
	for _, ch := range slow.Checks {
		if ch.Kind != verdict.Limit {
			t.Errorf("check %+v: kind %s, want limit", ch, ch.Kind)
		}
		if !ch.Pass {
			failed++
		}
	}
	if failed != 3 || verdict.Judge(slow.Checks) != verdict.Passed {
		t.Errorf("a slow step fails %d limits (want p99, errors and sales), and the run is %v", failed, verdict.Judge(slow.Checks))
	}
	if past := limits(&report.Run{}, c); past != "no request was answered" {
		t.Errorf("an empty step: %q", past)
	}
}
