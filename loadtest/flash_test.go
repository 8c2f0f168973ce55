package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stocklock/stocklock/internal/testskip"
	"github.com/stocklock/stocklock/loadtest/harness"
	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/loadtest/verdict"
)

func TestFlashConfig(t *testing.T) {
	cfg, err := ParseConfig([]string{"flash", "--buyers", "1000", "--shape", "ramp", "--threshold", "goodput>=10"}, func(k string) string {
		return map[string]string{"LOADTEST_PATIENCE": "1500ms", "LOADTEST_RETRIES": "2"}[k]
	}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := cfg.Scenario.(*harness.Flash)
	if f == nil || f.Buyers != 1000 || f.Shape != harness.ShapeRamp || f.Patience != 1500*time.Millisecond || f.Retries != 2 || f.Over != 4*time.Second {
		t.Fatalf("flash settings: %+v", f)
	}
	if !slices.Equal(cfg.Strategies, harness.HotSKU) || cfg.Stock != 100 {
		t.Errorf("strategies %v, stock %d; want the hot-sku ones, %v, and 100", cfg.Strategies, cfg.Stock, harness.HotSKU)
	}
	for args, want := range map[string]string{
		"flash --shape wave":              `--shape "wave": want one of burst, ramp, constant`,
		"flash --threshold p99<300ms":     "--threshold p99<300ms: p99 is not a figure of a flash sale",
		"flash --buyers 0 --patience 1ms": "--buyers 0: must be between 1 and 200000",
		"compare --threshold goodput>=1":  "--threshold goodput>=1: goodput is a figure of loadtest flash only",
	} {
		if _, err := ParseConfig(strings.Fields(args), noEnv, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
}

// TestFlashShort runs a small flash sale end to end on atomic (20 units,
// 1,000 buyers over a second) and checks the report's invariants, which
// hold however slow the machine: every buyer has exactly one final kind,
// no more sold than the stock, the ledger exactly the sales, every safety
// check passed, and the tables and the chart are written.
func TestFlashShort(t *testing.T) {
	testskip.Long(t, "builds the service and starts the stores and two replica processes")
	t.Parallel()
	dir, rep, stdout := runHarness(t, "flash", "--strategies", "atomic", "--stock", "20", "--buyers", "1000", "--over", "1s", "--retries", "1", "--warmup", "0s")
	if len(rep.Flash) != 1 {
		t.Fatalf("flash runs: %+v, want one", rep.Flash)
	}
	r := rep.Flash[0]
	buyers := 0
	for _, k := range r.Kinds {
		buyers += k.Buyers
	}
	timeline := 0
	for _, bin := range r.Timeline {
		for _, n := range bin {
			timeline += n
		}
	}
	if buyers != 1000 || timeline != 1000 {
		t.Errorf("buyers by kind %d, in the timeline %d; want each of the 1000 once: %+v", buyers, timeline, r.Kinds)
	}
	if r.Sold > r.Units || r.LedgerUnits > r.Units || r.LedgerUnits+r.Remaining != r.Units || r.Sold != r.Kind(report.KindSale).Buyers {
		t.Errorf("sold %d (%d sales), ledger %d, remaining %d, of %d units", r.Sold, r.Kind(report.KindSale).Buyers, r.LedgerUnits, r.Remaining, r.Units)
	}
	for _, c := range r.Checks {
		if !c.Pass && c.Kind == verdict.Safety {
			t.Errorf("check failed: %s", c)
		}
	}
	if r.Control.Readyz == 0 || r.Control.AdminGets == 0 || len(r.Won) != 100 || r.LedgerUnits > 0 && r.Won[99] != 1 {
		t.Errorf("control plane %+v, fairness curve %v: want 100 points ending at 1 (every ledger unit's buyer found)", r.Control, r.Won)
	}
	if !r.Control.OwnProcess {
		t.Errorf("the control probe ran beside the herd's client, not in a process of its own (TestMain sets harness.ProbeCommand)")
	}
	// The replicas saw every shed answer (a buyer's retry may be shed too),
	// and timed them.
	shed := 0
	for _, n := range r.ShedReasons {
		shed += n
	}
	if shed < r.Kind(report.KindShed).Buyers || (shed > 0) != (r.ReplicaShedP99 != nil) {
		t.Errorf("the replicas shed %d (%v), timed p99 %v; %d buyers' final answer was shed", shed, r.ShedReasons, r.ReplicaShedP99, r.Kind(report.KindShed).Buyers)
	}
	for _, want := range []string{"goodput/s", "first 10%", "heartbeat miss", "send lag p99", "in the replicas p99"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	if svg, err := os.ReadFile(filepath.Join(dir, report.FlashChartFile)); err != nil || !strings.Contains(string(svg), "answers by kind over time") {
		t.Errorf("%s: no chart (%v)", report.FlashChartFile, err)
	}
}
