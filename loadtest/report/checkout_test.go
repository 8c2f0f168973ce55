package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stocklock/stocklock/loadtest/verdict"
)

// TestCheckoutReport: the checkout runs reach the text table, the
// Markdown page and the one list of checks, scoped by strategy.
func TestCheckoutReport(t *testing.T) {
	rep := Report{Sections: []Section{CheckoutSection}, Checkout: []CheckoutRun{{Strategy: "atomic", HoldTTL: "2s", Think: "300ms", Abandon: 0.5, Late: 0.1, Faults: []string{"pause"},
		Holds: 40, Confirmed: 15, LateSent: 4, LateRefused: 4, Plain: 40, PlainSold: 40, CheckoutSalesPerSec: 3.7, PlainSalesPerSec: 10.1,
		Probes: 8, ProbesSold: 8, ExpiryP99: 43.9, Initial: 100, Remaining: 53, LedgerUnits: 55,
		FaultNotes: []string{"4.0s to 7.0s: SIGSTOP replica b"}, Answers: map[string]int{"hold": 40},
		Checks: verdict.Of(true, verdict.Zero("late_confirms_sold", 1))}}}
	var text, md bytes.Buffer
	if err := WriteText(&text, rep); err != nil {
		t.Fatal(err)
	}
	if err := WriteMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"atomic    checkout      40     15      3.7", "atomic    plain         40     40     10.1", "4 of 4", "108 of 108", "FAIL: late_confirms_sold 1, bound 0"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text table lacks %q:\n%s", want, text.String())
		}
	}
	for _, want := range []string{"## Checkout: holds beside plain decrements", "faults pause.", "- 4.0s to 7.0s: SIGSTOP replica b", "| **FAIL** | safety | late_confirms_sold | checkout · atomic | 1 | 0 |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("results.md lacks %q:\n%s", want, md.String())
		}
	}
	if word, _ := rep.Headline(); word != "FAIL" {
		t.Errorf("headline %s, want FAIL", word)
	}
}
