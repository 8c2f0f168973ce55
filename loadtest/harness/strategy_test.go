package harness

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stocklock/stocklock/loadtest/drill"
	"github.com/stocklock/stocklock/loadtest/history"
	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/loadtest/verdict"
)

// TestFaultProblemsReachTheReport runs the steps after an attack on a
// crash drill whose sales never resumed and whose orders were still
// pending at the read-back: both problems must be in the report next to
// those the verdict finds.
func TestFaultProblemsReachTheReport(t *testing.T) {
	run := report.Run{Strategy: "redis-lock", Safe: true, Fault: "crash"}
	d := &drill.Drill{Label: "crash", Strategy: "redis-lock"}
	at := time.Now()
	sales := []drill.Sale{{Start: at.Add(-20 * time.Millisecond), End: at.Add(-10 * time.Millisecond), Fence: 7}}
	judgeFault(&run, d, &drill.Event{At: at}, sales, at)
	if run.RecoverySeconds != nil || len(run.Problems) != 1 {
		t.Fatalf("no sale after the fault: recovery %v, problems %q; want none and one problem", run.RecoverySeconds, run.Problems)
	}
	pending := "orders still pending after the attack"
	run.Problems = append(run.Problems, pending)
	faultProblem := run.Problems[0]

	in := verdict.Input{
		Items: []verdict.Item{{SKU: "s", Initial: 10, Remaining: 8}},
		Acked: []verdict.Order{{ID: "o1", SKU: "s", Qty: 1}},
	}
	res := verdict.Audit(in)
	if len(res.Problems) == 0 {
		t.Fatalf("the verdict found nothing in %+v: the test needs one of its problems", in)
	}
	run.Linearizable = string(history.Yes)
	judge(&run, in, res)
	for _, want := range append([]string{faultProblem, pending}, res.Problems...) {
		if !slices.Contains(run.Problems, want) {
			t.Errorf("problem %q missing from the report: %q", want, run.Problems)
		}
	}
}

// TestFaultUndoneAfterInjectionError strikes a drill whose injector did
// its harm and then failed (as PartitionRedlock does after stopping
// servers): the fault must still be undone, and the error reported.
func TestFaultUndoneAfterInjectionError(t *testing.T) {
	h := New(Config{Duration: time.Second}, nil)
	undone := 0
	failed := errors.New("count the double holders: replica gone")
	d := &drill.Drill{Label: "partition", Fault: "partition", Inject: func(context.Context, *drill.Ctx) (*drill.Event, error) {
		return &drill.Event{At: time.Now(), Cleanup: func(context.Context) error { undone++; return nil }}, failed
	}}
	run := report.Run{Strategy: "redlock", Fault: "partition"}
	ctx := context.Background()
	faults := h.startFaults(ctx, run.Strategy, []string{"s"}, runOpts{drill: d, drills: DefaultDrills()}, time.Now().Add(-time.Hour))
	_, err := h.endFaults(ctx, &run, d, faults)
	if !errors.Is(err, failed) {
		t.Errorf("endFaults: %v; want the injector's error", err)
	}
	if undone != 1 {
		t.Errorf("the fault's Cleanup ran %d times; want once", undone)
	}
}
