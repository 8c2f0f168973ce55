package harness

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stocklock/stocklock/loadtest/verdict"
)

func TestBuyerKindSpreadsTheShares(t *testing.T) {
	n := map[string]int{}
	for j := range 1000 {
		n[buyerKind(j, 0.5, 0.1)]++
	}
	if n["abandon"] < 490 || n["abandon"] > 510 || n["late"] < 95 || n["late"] > 105 || n["in time"] != 1000-n["abandon"]-n["late"] {
		t.Errorf("kinds of 1000 buyers, abandon 0.5, late 0.1: %v", n)
	}
	if k := buyerKind(7, 0, 0); k != "in time" {
		t.Errorf("no abandon, no late: %s", k)
	}
}

func TestParseCheckoutFaults(t *testing.T) {
	for in, want := range map[string][]string{"": nil, "none": nil, "all": CheckoutFaults, "pause, crash,pause": {"pause", "crash"}} {
		if got, err := ParseCheckoutFaults(in); err != nil || !slices.Equal(got, want) {
			t.Errorf("%q: %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseCheckoutFaults("crash,redis-restart"); err == nil || !strings.Contains(err.Error(), `"redis-restart" is not a checkout fault`) {
		t.Errorf("redis-restart: %v", err)
	}
}

func TestCheckoutValidate(t *testing.T) {
	co := DefaultCheckout()
	cfg := Defaults(co)
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	co.Abandon, co.Late, co.Think, co.HoldTTL, co.Faults = 0.8, 0.3, 3*time.Second, 1500*time.Millisecond, []string{"pause", "redis-restart"}
	cfg.Replicas = []string{"http://127.0.0.1:8081"}
	err := cfg.Validate()
	for _, want := range []string{"Abandon 0.8 and Late 0.3", "Think 3s", "faults pause,redis-restart need at least two replicas the harness starts",
		`Faults "redis-restart": not a checkout fault`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v; want %q", err, want)
		}
	}
}

// TestCheckoutChecks: a run that kept its books passes every check; each
// broken promise fails its own.
func TestCheckoutChecks(t *testing.T) {
	good := checkoutTally{Initial: 108, Acked: 60, LedgerUnits: 60, LedgerHolds: 15, Confirmed: 15, Left: 48, ExpiryP99: 12,
		LateWanted: true, InTimeWanted: true, LateSent: 4, LateRefused: 4}
	if cs := good.checks(); verdict.Judge(cs) != verdict.Passed || slices.ContainsFunc(cs, func(c verdict.Check) bool { return !c.Pass }) {
		t.Errorf("a good run: %v", cs)
	}
	for name, bad := range map[string]func(*checkoutTally){
		"oversold":                      func(t *checkoutTally) { t.Acked, t.LedgerUnits, t.Left = 109, 109, -1 },
		"ledger_orders_of_holds":        func(t *checkoutTally) { t.LedgerHolds = 14 },
		"acked_sales_not_in_ledger":     func(t *checkoutTally) { t.AckedMissing = 1 },
		"late_confirms_sold":            func(t *checkoutTally) { t.LateSold = 1 },
		"confirms_stamped_after_expiry": func(t *checkoutTally) { t.StampedLate = 1 },
		"available_plus_sold":           func(t *checkoutTally) { t.Left = 47 },
		"held_after_expiry":             func(t *checkoutTally) { t.Held = 1 },
		"faults done":                   func(t *checkoutTally) { t.FaultFailed = true },
		"expiry_to_sellable_p99":        func(t *checkoutTally) { t.Unprobed = 1 },
		"late_confirms_refused":         func(t *checkoutTally) { t.LateRefused = 0 }, // none refused: nothing tested
		"confirms_sold":                 func(t *checkoutTally) { t.Confirmed, t.LedgerHolds = 0, 0 },
	} {
		tl := good
		bad(&tl)
		var failed []string
		for _, c := range tl.checks() {
			if !c.Pass {
				failed = append(failed, c.Name)
			}
		}
		if !slices.Contains(failed, name) {
			t.Errorf("%s broken: failed checks %v", name, failed)
		}
		limit := name == "expiry_to_sellable_p99" || name == "late_confirms_refused" || name == "confirms_sold"
		if want := map[bool]verdict.Status{true: verdict.Passed, false: verdict.Failed}[limit]; verdict.Judge(tl.checks()) != want {
			t.Errorf("%s broken: judged %v, want %v (a limit fails nothing)", name, verdict.Judge(tl.checks()), want)
		}
	}
}
