package report

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stocklock/stocklock/loadtest/verdict"
)

// FaultRow aggregates the repeats of one drill: one fault, one strategy.
type FaultRow struct {
	Fault    string `json:"fault"`
	Strategy string `json:"strategy"`
	Demo     bool   `json:"demo,omitempty"`
	Runs     int    `json:"runs"`
	Verdict  string `json:"verdict"`
	// Linearizable is the worst of the repeats' history checks: no over
	// unknown over yes; "-" when none was checked.
	Linearizable string `json:"linearizable"`

	Sold           int `json:"sold"`
	Oversold       int `json:"oversold"`
	LostUpdates    int `json:"lost_updates"`
	LedgerMismatch int `json:"ledger_mismatch"`
	Fenced         int `json:"fenced"`      // 503 fenced: a stale holder's read or write refused
	LeaseLost      int `json:"lease_lost"`  // 503 lease_lost: stopped before the write
	DoubleHeld     int `json:"double_held"` // see Run.DoubleHeld
	LockWait       int `json:"lock_unavailable"`
	NoAnswer       int `json:"no_answer"` // transport errors: refused, reset, timeout
	Other          int `json:"other"`     // other 503s and other statuses

	// Injected counts the runs whose fault was injected (see Run.Injected),
	// Recovered those in which sales resumed, whose times these are.
	Injected    int     `json:"injected"`
	Recovered   int     `json:"recovered"`
	RecoveryMed float64 `json:"recovery_median_s"`
	RecoveryMax float64 `json:"recovery_max_s"`
	// TokensOK is false when a run's tokens did not keep increasing, of
	// the TokenRuns that could check it.
	TokensOK  bool `json:"tokens_ok"`
	TokenRuns int  `json:"token_runs"`
}

// FaultRows aggregates the fault runs by fault and strategy, in the order they first ran.
func FaultRows(runs []Run) []FaultRow {
	var rows []FaultRow
	for _, g := range groupBy(runs, func(r Run) (string, bool) { return r.Fault + "\x00" + r.Strategy, r.Fault != "" }) {
		row := FaultRow{Fault: g[0].Fault, Strategy: g[0].Strategy, Demo: g[0].Demo, Runs: len(g), TokensOK: true, Linearizable: "-"}
		var recov []float64
		var checks []verdict.Check // every repeat's, for the row's verdict
		for _, r := range g {
			row.Sold += r.Sold
			row.Oversold += r.Oversold
			row.LostUpdates += r.LostUpdates
			row.LedgerMismatch += r.LedgerMismatch
			row.DoubleHeld += r.DoubleHeld
			for code, n := range r.Codes {
				switch c, ok := map[string]*int{"503 fenced": &row.Fenced, "503 lease_lost": &row.LeaseLost, "503 lock_unavailable": &row.LockWait}[code]; {
				case ok:
					*c += n
				case strings.HasPrefix(code, "no answer"):
					row.NoAnswer += n
				default:
					row.Other += n
				}
			}
			if r.Injected {
				row.Injected++
			}
			if r.RecoverySeconds != nil {
				recov = append(recov, *r.RecoverySeconds)
			}
			if r.Tokens != nil {
				row.TokenRuns++
				row.TokensOK = row.TokensOK && r.Tokens.OK
			}
			checks = append(checks, r.Checks...)
			if rank := map[string]int{"": -1, "-": -1, "yes": 0, "unknown": 1, "no": 2}; rank[r.Linearizable] > rank[row.Linearizable] {
				row.Linearizable = r.Linearizable
			}
		}
		row.Verdict = string(verdict.OutcomeOf(g[len(g)-1].Safe, checks))
		if len(recov) > 0 {
			slices.Sort(recov)
			row.Recovered, row.RecoveryMed, row.RecoveryMax = len(recov), recov[len(recov)/2], recov[len(recov)-1]
		}
		rows = append(rows, row)
	}
	return rows
}

var faultHeader = []string{"fault", "strategy", "runs", "verdict", "linearizable", "sold", "oversold", "lost upd", "ledger≠",
	"fenced", "lease lost", "2 holders", "lock wait 503", "no answer", "other", "resumed", "recovery med", "recovery max", "tokens"}

// name is the row's strategy, marked when it is a demonstration.
func (r FaultRow) name() string {
	return r.Strategy + map[bool]string{true: " (demo)"}[r.Demo]
}

func faultCells(r FaultRow) []string {
	resumed, med, worst, tokens := "-", "-", "-", "-"
	if r.Injected > 0 {
		resumed = fmt.Sprintf("%d/%d", r.Recovered, r.Injected)
	}
	if r.Recovered > 0 {
		med, worst = fmt.Sprintf("%.2fs", r.RecoveryMed), fmt.Sprintf("%.2fs", r.RecoveryMax)
	}
	if r.TokenRuns > 0 {
		tokens = map[bool]string{true: fmt.Sprintf("ok %d/%d", r.TokenRuns, r.Runs), false: "BROKEN"}[r.TokensOK]
	}
	return []string{
		r.Fault, r.name(), fmt.Sprint(r.Runs), r.Verdict, r.Linearizable, fmt.Sprint(r.Sold),
		fmt.Sprint(r.Oversold), fmt.Sprint(r.LostUpdates), fmt.Sprint(r.LedgerMismatch),
		fmt.Sprint(r.Fenced), fmt.Sprint(r.LeaseLost), fmt.Sprint(r.DoubleHeld), fmt.Sprint(r.LockWait), fmt.Sprint(r.NoAnswer),
		fmt.Sprint(r.Other), resumed, med, worst, tokens,
	}
}

// writeFaults writes the aggregated fault drills as a table; the Markdown
// adds their chart, the columns explained and each run's note.
func writeFaults(b *strings.Builder, rep Report, md bool) {
	if md {
		b.WriteString("![fault drills](" + FaultChartFile + ")\n\n")
	}
	table(b, md, rowsOf(faultHeader, FaultRows(rep.Runs), faultCells), func(col int) bool {
		return col < 2 || col == 3 || col == 4 || col == len(faultHeader)-1 // fault, strategy, verdict, linearizable, tokens
	})
	if !md {
		return
	}
	b.WriteString(`
Summed over the runs of each drill: *linearizable* is the worst of the
runs' history checks (no, then unknown, then yes); *sold*, *oversold*, *lost upd* and
*ledger≠* as in the comparison table; *fenced* are 503 fenced answers (a
stale holder's read or write refused by the fence); *lease lost* are 503
lease_lost answers (the lease ended before the write, nothing sent);
*2 holders* counts the polls of the replicas' /healthz, after a clock
step or a failover, at which two leases of the lock were held at once (a
double grant; a lone such poll is a handoff and is not counted, only runs
of two polls or more);
*lock wait 503* are requests that gave up waiting for the lock; *no answer*
are requests that got no HTTP answer (refused by a killed replica, reset,
timed out); *other* are other statuses (500 outcome_unknown when a store
write's fate is unknown); *resumed* counts the runs whose fault was
injected and after which sales resumed within the attack; *recovery* is the
longest time without a completed sale from the moment the fault struck to
the end of the attack (after a crash or a pause, the wait for the dead
holder's lease; after a store fault, the outage and the reconnection),
median and worst over those runs; *tokens* says in how many runs
fencing tokens were checked and held: every sale that started after the
fault was over carried a higher token than every sale completed before it
struck, and no token carried two sales (without an injected fault, as for
clock skew, only the second).
`)
	var notes strings.Builder
	for _, r := range rep.Runs {
		if r.Fault == "" {
			continue
		}
		fmt.Fprintf(&notes, "- %s, %s, repeat %d: %s", r.Fault, r.Strategy, r.Repeat, r.FaultNote)
		if len(r.Codes) > 0 {
			fmt.Fprintf(&notes, "; %s", counts(r.Codes))
		}
		if len(r.Problems) > 0 {
			fmt.Fprintf(&notes, "; **%s**", strings.Join(r.Problems, "; "))
		}
		for _, v := range r.Violations {
			fmt.Fprintf(&notes, "; not linearizable: [picture](%s), [history](%s)", v, r.History)
		}
		notes.WriteString("\n")
	}
	if notes.Len() > 0 {
		b.WriteString("\n### Every run\n\n" + notes.String())
	}
}

// FaultChartFile is the picture of a fault report.
const FaultChartFile = "faults.svg"

// drawFaults draws a row per drill: the time until sales resumed (median
// bar, worst tick, the crash target dashed), what the fence and the lease
// refused, and the anomalies.
func drawFaults(b *strings.Builder, rep Report) {
	rows := FaultRows(rep.Runs)
	const (
		rowH   = 30
		top    = 100
		labelX = 16
		recX   = 330
		recW   = 260
		refX   = 640
		anomX  = 820
		width  = 1000
	)
	ttl, _ := time.ParseDuration(rep.Settings.FaultTTL)
	target := cmp.Or(max(ttl.Seconds(), 0), 1) + 1 // the crash target: TTL+1s, taking 1s without a TTL
	maxRec := most(target*1.25, rows, func(r FaultRow) float64 { return r.RecoveryMax })
	x := func(s float64) int { return recX + int(float64(recW)*s/maxRec) }
	height := top + len(rows)*rowH + 50
	s := rep.Settings
	sub := fmt.Sprintf("%d req/s for %s per run, %d repeat(s), lock TTL %s, write stall %s, 2 replicas; %s", s.Rate, s.Duration, s.Repeat, s.FaultTTL, s.WriteStall, rep.Started.Format("2006-01-02 15:04 MST"))
	svgHead(b, width, height, 12, "stocklock fault drills: what survives, and how fast sales resume",
		esc(clip(sub, 150)), esc(clip(rep.Host, 150)))
	hy := top - 12
	fmt.Fprintf(b, `<text x="%d" y="%d" font-weight="bold">longest gap in sales (median bar, worst |)</text>`+"\n", recX, hy)
	fmt.Fprintf(b, `<text x="%d" y="%d" font-weight="bold">stale holder refused</text>`+"\n", refX, hy)
	fmt.Fprintf(b, `<text x="%d" y="%d" font-weight="bold">anomalies</text>`+"\n", anomX, hy)
	for i := range rows {
		if i%2 == 0 {
			fmt.Fprintf(b, `<rect x="0" y="%d" width="%d" height="%d" fill="#f5f5f5"/>`+"\n", top+i*rowH, width, rowH)
		}
	}
	tx := x(target)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#c62828" stroke-dasharray="4 3"/>`+"\n", tx, top-4, tx, top+len(rows)*rowH)
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="10" fill="#c62828" text-anchor="middle">crash target TTL+1s</text>`+"\n", tx, top+len(rows)*rowH+12)
	for sec := 0.0; sec <= maxRec; sec++ {
		fmt.Fprintf(b, `<text x="%d" y="%d" font-size="10" fill="#777" text-anchor="middle">%gs</text>`+"\n", x(sec), top+len(rows)*rowH+24, sec)
	}
	for i, r := range rows {
		cy := top + i*rowH + rowH/2
		label := r.Fault + " · " + r.name()
		fmt.Fprintf(b, `<text x="%d" y="%d" fill="%s">%s</text>`+"\n", labelX, cy+4, verdictColor(r.Verdict), esc(clip(label, 48)))
		switch {
		case r.Injected == 0:
			fmt.Fprintf(b, `<text x="%d" y="%d" font-size="11" fill="#777">no injection: the skew is configured</text>`+"\n", recX, cy+4)
		case r.Recovered == 0:
			fmt.Fprintf(b, `<text x="%d" y="%d" font-size="11" fill="#c62828">sales did not resume in any run</text>`+"\n", recX, cy+4)
		default:
			color := map[bool]string{false: "#1565c0", true: "#9e9e9e"}[r.Demo]
			fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="14" fill="%s"/>`+"\n", recX, cy-7, x(r.RecoveryMed)-recX, color)
			mx := x(r.RecoveryMax)
			fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000" stroke-width="2"/>`+"\n", mx, cy-9, mx, cy+9)
			label, fill := fmt.Sprintf("%.2fs", r.RecoveryMed), "#000"
			if n := r.Injected - r.Recovered; n > 0 {
				label, fill = label+fmt.Sprintf(" (%d did not resume)", n), "#c62828"
			}
			fmt.Fprintf(b, `<text x="%d" y="%d" font-size="11" fill="%s">%s</text>`+"\n", mx+5, cy+4, fill, esc(label))
		}
		fmt.Fprintf(b, `<text x="%d" y="%d">fenced %d · lease lost %d</text>`+"\n", refX, cy+4, r.Fenced, r.LeaseLost)
		marks := anomalyMarks(r.Oversold, r.LostUpdates, r.LedgerMismatch)
		if !r.TokensOK {
			marks = append(marks, "tokens")
		}
		if len(marks) == 0 {
			fmt.Fprintf(b, `<circle cx="%d" cy="%d" r="6" fill="#2e7d32"/><text x="%d" y="%d" fill="#2e7d32">none</text>`+"\n", anomX+6, cy, anomX+18, cy+4)
		} else {
			fmt.Fprintf(b, `<circle cx="%d" cy="%d" r="6" fill="#c62828"/><text x="%d" y="%d" fill="#c62828">%s</text>`+"\n", anomX+6, cy, anomX+18, cy+4, esc(strings.Join(marks, ", ")))
		}
	}
	ly := top + len(rows)*rowH + 44
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="12" height="12" fill="#1565c0"/><text x="%d" y="%d">safe configuration</text>`+"\n", labelX, ly-10, labelX+18, ly)
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="12" height="12" fill="#9e9e9e"/><text x="%d" y="%d">demonstration (a safety off)</text>`+"\n", labelX+150, ly-10, labelX+168, ly)
	b.WriteString("</svg>\n")
}
