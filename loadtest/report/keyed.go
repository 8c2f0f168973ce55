package report

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/stocklock/stocklock/loadtest/verdict"
)

// KeyedRun is one run of the keyed drill: purchases with an Idempotency-Key
// each, retried across two replicas until they sell, while one is killed
// -9 and restarted and the other frozen past its lock TTL and heartbeat.
type KeyedRun struct {
	Repeat     int      `json:"repeat"`
	Strategies []string `json:"strategies"`
	Faults     []string `json:"faults"` // what was done, when, in order

	Purchases  int `json:"purchases"`
	Sold       int `json:"sold"`       // purchases that got a sale
	Unfinished int `json:"unfinished"` // purchases still without a sale when the drill gave up on them
	Attempts   int `json:"attempts"`   // every request sent, first tries included

	UnitsTaken   int `json:"units_taken"`   // stock before minus stock after, over the drill's skus
	LedgerOrders int `json:"ledger_orders"` // orders in the ledger of those skus
	KeysTwice    int `json:"keys_twice"`    // keys with more than one order
	Pending      int `json:"pending"`       // units taken whose order never reached the ledger

	// Settling and after kill (freeze), in seconds, as the Markdown
	// explains them (writeKeyed).
	SettleP50      float64 `json:"settle_p50_s"`
	SettleP99      float64 `json:"settle_p99_s"`
	SettleMax      float64 `json:"settle_max_s"`
	AfterKillMax   float64 `json:"after_kill_max_s"`
	AfterFreezeMax float64 `json:"after_freeze_max_s"`

	// Answers counts every answer that was not a sale, by status and
	// code ("409 idempotency_in_progress", "transport", ...).
	Answers map[string]int  `json:"answers"`
	Checks  []verdict.Check `json:"checks"` // the drill's promise: each purchase sold once
}

// OK reports whether the run kept every promise.
func (r KeyedRun) OK() bool { return verdict.Judge(r.Checks) == verdict.Passed }

// writeKeyed writes one line per run; the Markdown adds what was done in
// each run and the answers that were not sales.
func writeKeyed(b *strings.Builder, rep Report, md bool) {
	if md {
		b.WriteString("## Keyed purchases through a kill -9 and a freeze\n\n")
		b.WriteString("Settle: from a purchase's first request to its sale. After kill (freeze): of the purchases whose first attempt the kill (freeze) caught, the longest from the fault to the sale.\n\n")
	}
	header := []string{"run", "purchases", "sold", "unfinished", "units taken", "ledger", "keys sold twice", "settle p50", "p99", "max", "after kill", "after freeze", "attempts", "verdict"}
	table(b, md, rowsOf(header, rep.Keyed, func(r KeyedRun) []string {
		return []string{
			fmt.Sprint(r.Repeat), fmt.Sprint(r.Purchases), fmt.Sprint(r.Sold), fmt.Sprint(r.Unfinished),
			fmt.Sprint(r.UnitsTaken), fmt.Sprint(r.LedgerOrders), fmt.Sprint(r.KeysTwice),
			fmt.Sprintf("%.2fs", r.SettleP50), fmt.Sprintf("%.2fs", r.SettleP99), fmt.Sprintf("%.2fs", r.SettleMax),
			fmt.Sprintf("%.2fs", r.AfterKillMax), fmt.Sprintf("%.2fs", r.AfterFreezeMax),
			fmt.Sprint(r.Attempts), judged(r.Checks, "exactly once", "FAILED: "),
		}
	}), func(col int) bool { return col == 13 })
	if !md {
		return
	}
	for _, r := range rep.Keyed {
		fmt.Fprintf(b, "\n### Run %d (%s)\n\n", r.Repeat, strings.Join(r.Strategies, ", "))
		for _, f := range r.Faults {
			fmt.Fprintf(b, "- %s\n", f)
		}
		if len(r.Answers) > 0 {
			b.WriteString("\nAnswers other than a sale: " + counts(r.Answers) + ".\n")
		}
	}
}

// judged is pass when no check fails the run (see verdict.Failures), else
// failed and the checks that do.
func judged(checks []verdict.Check, pass, failed string) string {
	if f := verdict.Failures(checks); len(f) > 0 {
		return failed + strings.Join(f, "; ")
	}
	return pass
}

// counts writes a count per name, in name order: "a × 2, b × 1".
func counts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s × %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
