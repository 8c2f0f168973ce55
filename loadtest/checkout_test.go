package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/stocklock/stocklock/internal/testskip"
	"github.com/stocklock/stocklock/loadtest/harness"
	"github.com/stocklock/stocklock/loadtest/verdict"
	"github.com/stocklock/stocklock/pkg/strategy"
)

func TestCheckoutConfig(t *testing.T) {
	cfg, err := ParseConfig([]string{"checkout", "--faults", "pause,crash"}, func(k string) string {
		return map[string]string{"LOADTEST_ABANDON": "0.3", "LOADTEST_HOLD_TTL": "1500ms"}[k]
	}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	co, _ := cfg.Scenario.(*harness.Checkout)
	if co == nil || co.Abandon != 0.3 || co.Late != 0.1 || co.HoldTTL.String() != "1.5s" || !slices.Equal(co.Faults, []string{"pause", "crash"}) {
		t.Fatalf("checkout settings: %+v", co)
	}
	if want := strategy.NamesOf(func(in strategy.Info) bool { return in.Holds }); !slices.Equal(cfg.Strategies, want) {
		t.Errorf("strategies %v, want those that take holds, %v", cfg.Strategies, want)
	}
	if _, err := ParseConfig([]string{"checkout", "--late", "0.6"}, noEnv, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "--abandon 0.5 and --late 0.6") {
		t.Errorf("--late 0.6 beside --abandon 0.5: %v", err)
	}
}

// TestCheckoutShort runs the checkout scenario on atomic for a few
// seconds, with replica b stopped past the holds' TTL: every safety check
// must pass, late confirms must have been refused, and the report must
// show the sales of both kinds and the expiry probes (a probe that must
// buy through the stopped replica may not sell within its 5 s, so one is
// enough).
func TestCheckoutShort(t *testing.T) {
	testskip.Long(t, "builds the service and starts the stores and two replica processes")
	t.Parallel()
	// A 5 s TTL: on a loaded CI machine, with a replica stopped, confirms
	// sent in time took more than 2 s, and none sold.
	_, rep, stdout := runHarness(t, "checkout", "--strategies", "atomic", "--duration", "4s", "--hold-ttl", "5s", "--probes", "5", "--faults", "pause", "--warmup", "500ms")
	if len(rep.Checkout) != 1 {
		t.Fatalf("checkout runs: %+v, want one", rep.Checkout)
	}
	r := rep.Checkout[0]
	var names []string
	for _, c := range r.Checks {
		names = append(names, c.Name)
		if !c.Pass && c.Kind == verdict.Safety {
			t.Errorf("check failed: %s", c)
		}
	}
	for _, want := range []string{"oversold", "ledger_orders_of_holds", "late_confirms_sold", "available_plus_sold", "held_after_expiry", "expiry_to_sellable_p99"} {
		if !slices.Contains(names, want) {
			t.Errorf("no check %s among %v", want, names)
		}
	}
	// A confirm in time sells only if its answer comes within the TTL,
	// which a loaded machine may give none (a CI run: 0 of 40 buyers'
	// confirms, sale p50 30 s); whether any did is the run's
	// confirms_sold limit, and the test only reports it.
	if r.LateRefused == 0 || r.PlainSold == 0 || r.ProbesSold == 0 {
		t.Errorf("late confirms %d refused of %d, plain sales %d, probes sold %d of 5", r.LateRefused, r.LateSent, r.PlainSold, r.ProbesSold)
	}
	t.Logf("confirms in time sold: %d", r.Confirmed)
	if len(r.FaultNotes) != 1 || !strings.Contains(r.FaultNotes[0], "SIGSTOP replica") || !strings.Contains(stdout, "expiry→sellable") {
		t.Errorf("faults done %q; stdout:\n%s", r.FaultNotes, stdout)
	}
}
