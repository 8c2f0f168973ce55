package report

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/stocklock/stocklock/loadtest/verdict"
)

// CheckoutRun is one strategy's run of the checkout scenario (loadtest
// checkout, docs/holds.md): buyers who hold a unit and abandon it, confirm
// it, or confirm it late on purpose, beside buyers who decrement, on one
// sku; and probes that buy a unit from the moment its hold can expire.
type CheckoutRun struct {
	Strategy string   `json:"strategy"`
	HoldTTL  string   `json:"hold_ttl"`
	Think    string   `json:"think"`
	Abandon  float64  `json:"abandon"`
	Late     float64  `json:"late"`
	Faults   []string `json:"faults,omitempty"`

	Holds        int `json:"holds"`         // holds created by buyers
	HoldsRefused int `json:"holds_refused"` // hold creates answered otherwise (sold out, ...)
	Abandoned    int `json:"abandoned"`
	Confirmed    int `json:"confirmed"`    // confirms answered 200
	LateSent     int `json:"late_sent"`    // confirms sent once a read said the hold expired
	LateRefused  int `json:"late_refused"` // of them, refused hold_expired
	PausedLate   int `json:"paused_late"`  // confirms in flight to a stopped replica whose hold read expired meanwhile
	Plain        int `json:"plain"`        // plain decrement buyers
	PlainSold    int `json:"plain_sold"`

	// Sales/s and latencies in ms (of the call that sells, and of the
	// hold's create), as the Markdown explains them (writeCheckout).
	CheckoutSalesPerSec float64 `json:"checkout_sales_per_s"`
	PlainSalesPerSec    float64 `json:"plain_sales_per_s"`
	HoldP99             float64 `json:"hold_p99_ms"`
	ConfirmP50          float64 `json:"confirm_p50_ms"`
	ConfirmP99          float64 `json:"confirm_p99_ms"`
	DecrementP50        float64 `json:"decrement_p50_ms"`
	DecrementP99        float64 `json:"decrement_p99_ms"`

	// Expiry to sellable, in ms, over the probes that sold (see
	// writeCheckout).
	Probes     int     `json:"probes"`
	ProbesSold int     `json:"probes_sold"`
	ExpiryP50  float64 `json:"expiry_to_sellable_p50_ms"`
	ExpiryP99  float64 `json:"expiry_to_sellable_p99_ms"`

	// The books once every hold expired: Initial units on the buyers'
	// sku (each probe's sku has one more), and over all the run's skus
	// the units left, in the ledger, and still held.
	Initial     int `json:"initial"`
	Remaining   int `json:"remaining"`
	LedgerUnits int `json:"ledger_units"`
	HeldLeft    int `json:"held_left"`

	FaultNotes  []string        `json:"fault_notes,omitempty"` // what was done, when
	FaultFailed bool            `json:"fault_failed,omitempty"`
	Answers     map[string]int  `json:"answers"` // by call and answer
	Checks      []verdict.Check `json:"checks"`
}

// writeCheckout writes the sales of checkout and of plain decrements side
// by side, then the holds and their checks; the Markdown adds each run's.
func writeCheckout(b *strings.Builder, rep Report, md bool) {
	runs := rep.Checkout
	sales := [][]string{{"strategy", "kind", "buyers", "sales", "sales/s", "sale p50", "sale p99", "hold p99"}}
	holds := [][]string{{"strategy", "holds", "abandoned", "confirmed", "late refused", "paused late", "expiry→sellable p50", "p99", "probes sold", "available+sold", "held left", "verdict"}}
	for _, r := range runs {
		sales = append(sales,
			[]string{r.Strategy, "checkout", fmt.Sprint(r.Holds + r.HoldsRefused), fmt.Sprint(r.Confirmed), fmt.Sprintf("%.1f", r.CheckoutSalesPerSec), Ms(r.ConfirmP50), Ms(r.ConfirmP99), Ms(r.HoldP99)},
			[]string{r.Strategy, "plain", fmt.Sprint(r.Plain), fmt.Sprint(r.PlainSold), fmt.Sprintf("%.1f", r.PlainSalesPerSec), Ms(r.DecrementP50), Ms(r.DecrementP99), "-"})
		holds = append(holds, []string{r.Strategy, fmt.Sprint(r.Holds), fmt.Sprint(r.Abandoned), fmt.Sprint(r.Confirmed),
			fmt.Sprintf("%d of %d", r.LateRefused, r.LateSent), fmt.Sprint(r.PausedLate), Ms(r.ExpiryP50), Ms(r.ExpiryP99),
			fmt.Sprintf("%d of %d", r.ProbesSold, r.Probes), fmt.Sprintf("%d of %d", r.Remaining+r.LedgerUnits, r.Initial+r.Probes), fmt.Sprint(r.HeldLeft),
			judged(r.Checks, "pass", "FAIL: ")})
	}
	if md && len(runs) > 0 {
		r := runs[0]
		fmt.Fprintf(b, "## Checkout: holds beside plain decrements\n\nHold TTL %s, think %s, abandon %g, late %g, faults %s. Sales/s: each kind's sales over the time from the run's start to the completion of 95%% of them; sale p50/p99: the confirm's or the decrement's latency. Expiry→sellable: from the earliest moment a probe's hold can expire (its create's sending plus the TTL, on the harness's clock) to the answer of the sale that took its unit. Available+sold: units left plus units in the ledger once every hold expired, of the stock.\n\n",
			r.HoldTTL, r.Think, r.Abandon, r.Late, cmp.Or(strings.Join(r.Faults, ", "), "none"))
	}
	left := func(col int) bool { return col < 2 || col == 11 }
	table(b, md, sales, left)
	b.WriteString("\n")
	table(b, md, holds, left)
	if !md {
		return
	}
	for _, r := range runs {
		fmt.Fprintf(b, "\n### %s\n\n", r.Strategy)
		for _, f := range r.FaultNotes {
			fmt.Fprintf(b, "- %s\n", f)
		}
		if len(r.FaultNotes) > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(b, "Calls and answers: %s.\n", counts(r.Answers))
	}
}
