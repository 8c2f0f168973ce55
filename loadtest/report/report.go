// Package report turns the load-test runs into a terminal table, JSON and
// Markdown files and an SVG chart comparing the strategies.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/stocklock/stocklock/loadtest/verdict"
)

// Latency is a latency distribution in milliseconds.
type Latency struct {
	P50 float64 `json:"p50_ms"`
	P95 float64 `json:"p95_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

// Run is the measured outcome of one strategy.
type Run struct {
	Strategy string `json:"strategy"`
	Safe     bool   `json:"safe"`
	Verdict  string `json:"verdict"`
	// Checks are the decisions on the run, the verdict's source.
	Checks []verdict.Check `json:"checks,omitempty"`

	SKUs  []string `json:"skus"`
	Stock int      `json:"stock_per_sku"`
	Qty   int      `json:"qty"`

	// Requests is the number of decrement requests sent; the next fields
	// split them by class.
	Requests    int `json:"requests"`
	Orders      int `json:"orders"`       // 200 responses
	SoldOut     int `json:"sold_out"`     // 409 sold_out
	Unavailable int `json:"unavailable"`  // 503
	Other       int `json:"other_status"` // any other status
	Transport   int `json:"transport_errors"`

	Sold           int `json:"sold"` // units: sum of qty over the 200s
	Initial        int `json:"initial"`
	Remaining      int `json:"remaining"`
	Oversold       int `json:"oversold"`
	LostUpdates    int `json:"lost_updates"`
	Unacknowledged int `json:"unacknowledged"`
	LedgerMismatch int `json:"ledger_mismatch"`
	// FalseSoldOut counts sold_out answers for a qty that the stock left
	// at the end still covered (verdict.Result.FalseSoldOut).
	FalseSoldOut int            `json:"false_sold_out"`
	Ledger       verdict.Ledger `json:"ledger"`
	LedgerOrders int            `json:"ledger_orders"`

	// AttackSeconds is how long the attack ran, from the first request to
	// the last response.
	AttackSeconds float64 `json:"attack_seconds"`
	// SellingSeconds runs from the first request to the end of the last
	// 200: the window in which the stock was being sold.
	SellingSeconds float64 `json:"selling_seconds"`
	// SalesPerSec is the rate at which sales completed while the stock
	// lasted: 95% of the sales (all, under 20) over the time from the
	// attack's start until that many had completed. A run that sells out
	// early is not diluted by its sold-out tail, nor stretched by one
	// straggler, and the rate cannot exceed the offered one.
	SalesPerSec float64 `json:"sales_per_sec"`
	// ReqPerSec is the request rate achieved over the whole attack.
	ReqPerSec float64 `json:"req_per_sec"`
	// TargetRate is the rate asked for (0: as fast as the workers allow).
	TargetRate int `json:"target_rate"`

	Latency Latency `json:"latency"`
	// LockWaitP99 is the 99th percentile of the replicas' lock wait
	// histogram over the run, in ms; nil when the strategy takes no lock
	// or the replicas export no such metric.
	LockWaitP99 *float64 `json:"lock_wait_p99_ms,omitempty"`

	// Fault drills only (see FaultRow): the fault as the tables name it,
	// which repeat this was, and what was done.
	Fault     string `json:"fault,omitempty"`
	Repeat    int    `json:"repeat,omitempty"`
	Demo      bool   `json:"demo,omitempty"` // a safe strategy deliberately weakened (fencing off, redis-stock acknowledging after Redis)
	FaultNote string `json:"fault_note,omitempty"`
	// FaultAt is when the fault struck, in seconds from the attack's
	// start; nil when none did.
	FaultAt *float64 `json:"fault_at_s,omitempty"`
	// RecoverySeconds is how long after the fault sales resumed; nil when
	// they did not within the attack, or no fault was injected.
	RecoverySeconds *float64 `json:"recovery_seconds,omitempty"`
	// Injected is true when the fault was injected (not skipped, not a
	// configuration); with a nil RecoverySeconds, sales never resumed.
	Injected bool `json:"injected,omitempty"`
	// DoubleHeld counts the polls after the fault at which two replicas
	// held the lock at once (drills that look for double grants).
	DoubleHeld int                 `json:"double_held,omitempty"`
	Tokens     *verdict.TokenCheck `json:"tokens,omitempty"`
	// Codes counts the answers that were not a sale or sold out, by
	// status and error code ("503 fenced") or kind of missing answer.
	Codes map[string]int `json:"codes,omitempty"`

	// Capacity sweeps only: the step's number (from 1) in its sweep, the
	// replicas it ran on, and why it was past the limits ("" within them).
	CapacityStep int    `json:"capacity_step,omitempty"`
	ReplicaCount int    `json:"replicas,omitempty"`
	Saturated    string `json:"saturated,omitempty"`
	// Capacity sweeps of lock strategies only: the mean time of each step
	// of a sale (lock, read, write, release, ledger, unpend), in ms, over
	// the step's window, from the replicas' stock_sale_step_seconds; and
	// the bound those times put on the sales of one hot item, in sales/s:
	// one over the mean time of the steps run while holding the lock (see
	// HeldSteps). Nil when the replicas export no step times.
	StepMs      map[string]float64 `json:"sale_step_ms,omitempty"`
	BoundPerSec *float64           `json:"bound_sales_per_sec,omitempty"`

	// Strategies are the strategies of a mixed run (Strategy "mixed"),
	// which decremented the same skus at once; Outcomes counts its
	// requests by strategy and outcome.
	Strategies []string                  `json:"strategies,omitempty"`
	Outcomes   map[string]map[string]int `json:"outcomes_by_strategy,omitempty"`

	// The history and its linearizability check. Linearizable is yes, no
	// or unknown (the checker ran out of time); Conflicts says, per
	// violating sku, which operations no order reconciles, and
	// Violations are porcupine's pictures of them.
	History      string   `json:"history,omitempty"`
	HistoryOps   int      `json:"history_ops,omitempty"`
	Linearizable string   `json:"linearizable,omitempty"`
	Conflicts    []string `json:"linearizability_conflicts,omitempty"`
	Violations   []string `json:"violations,omitempty"`
	CheckSeconds float64  `json:"check_seconds,omitempty"`

	// With retries: requests sent again with the same Idempotency-Key,
	// answers the proxy cut, and ledger units sold twice for one key.
	Resent         int `json:"resent,omitempty"`
	Cuts           int `json:"cuts,omitempty"`
	DoubleSold     int `json:"double_sold,omitempty"`
	DoubleSoldKeys int `json:"double_sold_keys,omitempty"`
	// Unrecorded counts units taken from the stock with no order in the
	// ledger once no order was pending.
	Unrecorded int `json:"unrecorded,omitempty"`

	StatusCodes map[string]int `json:"status_codes"`
	ByReplica   map[string]int `json:"orders_by_replica,omitempty"`
	// On a Redis Cluster (redis-lock runs): the skus whose lock keys a
	// master serves, and their requests and sales (orders), by master.
	SKUsByShard     map[string]int `json:"skus_by_shard,omitempty"`
	RequestsByShard map[string]int `json:"requests_by_shard,omitempty"`
	SalesByShard    map[string]int `json:"sales_by_shard,omitempty"`
	ErrorSample     []string       `json:"error_sample,omitempty"`
	Problems        []string       `json:"problems,omitempty"`
	Plot            string         `json:"plot,omitempty"`
}

// Errors is the number of requests that were neither a sale, nor sold out,
// nor a 503.
func (r Run) Errors() int { return r.Other + r.Transport }

// Settings are the knobs of a whole harness run.
type Settings struct {
	Rate       int      `json:"rate"`
	Duration   string   `json:"duration"`
	Requests   int      `json:"requests"`
	Stock      int      `json:"stock"`
	Qty        int      `json:"qty"`
	SKUs       int      `json:"skus"`
	Skew       float64  `json:"skew"`
	Workers    int      `json:"workers"`
	MaxWorkers int      `json:"max_workers"`
	Timeout    string   `json:"timeout"`
	RMWDelay   string   `json:"rmw_delay,omitempty"`
	Strategies []string `json:"strategies"`
	// Fault drills only.
	Faults     []string `json:"faults,omitempty"`
	Repeat     int      `json:"repeat,omitempty"`
	FaultTTL   string   `json:"fault_ttl,omitempty"`
	WriteStall string   `json:"write_stall,omitempty"`
	// Capacity sweeps only: the limits a step must stay within.
	CapacityLimit string `json:"capacity_limit,omitempty"`
	// The thresholds the user set, as given.
	Thresholds []string `json:"thresholds,omitempty"`
}

// Report is everything a harness run produced.
type Report struct {
	Started     time.Time `json:"started"`
	OutDir      string    `json:"out_dir"`
	WallSeconds float64   `json:"wall_seconds"`
	Host        string    `json:"host"`
	// Store says which MongoDB, Redis and etcd the replicas used, when
	// the harness knows (it started them); empty for external replicas.
	Store    string   `json:"store,omitempty"`
	Redis    string   `json:"redis,omitempty"`
	Etcd     string   `json:"etcd,omitempty"`
	Replicas []string `json:"replicas"`
	Settings Settings `json:"settings"`
	Runs     []Run    `json:"runs"`
	// Keyed holds the runs of the keyed drill (loadtest keyed), which has
	// no Runs.
	Keyed []KeyedRun `json:"keyed,omitempty"`
	// Checkout holds the runs of the checkout scenario (loadtest
	// checkout), which has no Runs.
	Checkout []CheckoutRun `json:"checkout,omitempty"`
	// Soak holds a soak's samples (loadtest soak); its segments are Runs.
	Soak *Soak `json:"soak,omitempty"`
	// Sections are the run mode's parts of the report; none is the
	// comparison's.
	Sections []Section `json:"-"`
	// OK is true when the run finished and no check failed it (see
	// verdict.Judge).
	OK bool `json:"ok"`
}

// Scope names the run in a list of checks.
func (r Run) Scope() string {
	switch {
	case r.CapacityStep > 0:
		return fmt.Sprintf("%s, %d replicas, %d req/s", r.Strategy, r.ReplicaCount, r.TargetRate)
	case r.Fault != "":
		return fmt.Sprintf("%s · %s, repeat %d", r.Fault, r.Strategy, r.Repeat)
	}
	return r.Strategy
}

// Checks is the one list of the run's checks, each with its scope: every
// run's, every keyed run's, the soak's.
func (rep Report) Checks() []verdict.Check {
	var out []verdict.Check
	add := func(scope string, cs []verdict.Check) {
		for _, c := range cs {
			c.Scope = scope
			out = append(out, c)
		}
	}
	for _, r := range rep.Runs {
		add(r.Scope(), r.Checks)
	}
	for _, k := range rep.Keyed {
		add(fmt.Sprintf("keyed run %d", k.Repeat), k.Checks)
	}
	for _, c := range rep.Checkout {
		add("checkout · "+c.Strategy, c.Checks)
	}
	if rep.Soak != nil {
		out = append(out, rep.Soak.Checks...) // scoped by replica
	}
	return out
}

// Headline is the verdict on the whole run in a word and a sentence.
func (rep Report) Headline() (word, sentence string) {
	switch verdict.Judge(rep.Checks()) {
	case verdict.Failed:
		return "FAIL", "a safety check failed: a safe strategy oversold, lost an update, disagreed with the ledger, had a history that is not linearizable, or a drill broke its promise (see the checks)"
	case verdict.Breached:
		return "BREACHED", "every safety check passed, and a threshold you set was breached (see the checks)"
	}
	if !rep.OK {
		return "INCOMPLETE", "the run stopped before its end; no check it made failed"
	}
	return "PASS", "no safe strategy oversold, lost an update, disagreed with the ledger or had a history that is not linearizable, and every threshold held"
}

// Ms formats milliseconds compactly: 0.42ms, 12.3ms, 1.25s.
func Ms(ms float64) string {
	switch {
	case ms >= 1000:
		return fmt.Sprintf("%.2fs", ms/1000)
	case ms >= 100:
		return fmt.Sprintf("%.0fms", ms)
	case ms >= 10:
		return fmt.Sprintf("%.1fms", ms)
	default:
		return fmt.Sprintf("%.2fms", ms)
	}
}

func lockWait(r Run) string {
	if r.LockWaitP99 == nil {
		return "-"
	}
	return Ms(*r.LockWaitP99)
}

var header = []string{"strategy", "verdict", "linearizable", "requests", "sold", "sold out", "503", "errors",
	"oversold", "lost upd", "ledger≠", "false s/o", "sales/s", "req/s", "p50", "p95", "p99", "max", "lock wait p99"}

func row(r Run) []string {
	return []string{
		r.Strategy, r.Verdict, linText(r),
		fmt.Sprint(r.Requests), fmt.Sprint(r.Sold), fmt.Sprint(r.SoldOut), fmt.Sprint(r.Unavailable),
		fmt.Sprint(r.Errors()), fmt.Sprint(r.Oversold), fmt.Sprint(r.LostUpdates), fmt.Sprint(r.LedgerMismatch),
		fmt.Sprint(r.FalseSoldOut), fmt.Sprintf("%.1f", r.SalesPerSec), fmt.Sprintf("%.1f", r.ReqPerSec),
		Ms(r.Latency.P50), Ms(r.Latency.P95), Ms(r.Latency.P99), Ms(r.Latency.Max), lockWait(r),
	}
}

// linText is the linearizable cell: yes, no, unknown, or "-" for a run
// without a checked history.
func linText(r Run) string {
	if r.Linearizable == "" {
		return "-"
	}
	return r.Linearizable
}

// WriteTable writes the runs as an aligned plain-text table: names to
// the left, numbers to the right.
func WriteTable(w io.Writer, runs []Run) error {
	rows := [][]string{header}
	for _, r := range runs {
		rows = append(rows, row(r))
	}
	return writeAligned(w, rows, func(col int) bool { return col < 3 })
}

// writeAligned writes rows (the first is the header) as columns two
// spaces apart, padded to the widest cell: left-aligned where left says
// so, right-aligned (numbers) elsewhere.
func writeAligned(w io.Writer, rows [][]string, left func(col int) bool) error {
	var width []int
	for _, cells := range rows {
		for i, c := range cells {
			if i == len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, cells := range rows {
		for i, c := range cells {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i > 0 {
				b.WriteString("  ")
			}
			if left(i) {
				b.WriteString(c + pad)
			} else {
				b.WriteString(pad + c)
			}
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeMarkdownTable writes rows (the first is the header) as a Markdown
// table: text to the left where left says so, numbers to the right, and a
// failure in bold.
func writeMarkdownTable(b *strings.Builder, rows [][]string, left func(col int) bool) {
	for i, cells := range rows {
		for j, c := range cells {
			if i > 0 && (c == string(verdict.Fail) || c == "breached") {
				cells[j] = "**" + c + "**"
			}
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
		if i == 0 {
			for j := range cells {
				b.WriteString(map[bool]string{true: "| --- ", false: "| ---: "}[left(j)])
			}
			b.WriteString("|\n")
		}
	}
}

// WriteJSON writes the report as indented JSON.
func WriteJSON(w io.Writer, rep Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// facts are the report's setting lines: machine, stores, replicas, load.
func (rep Report) facts() []string {
	out := []string{"machine: " + rep.Host}
	for _, f := range [][2]string{{"MongoDB", rep.Store}, {"Redis", rep.Redis}, {"etcd", rep.Etcd}} {
		if f[1] != "" {
			out = append(out, f[0]+": "+f[1])
		}
	}
	out = append(out, "replicas: "+strings.Join(rep.Replicas, ", "))
	s := rep.Settings
	load := fmt.Sprintf("%d req/s", s.Rate)
	if s.Rate == 0 {
		load = "as fast as the workers allow"
	}
	bound := s.Duration
	if s.Requests > 0 {
		bound = fmt.Sprintf("%d requests", s.Requests)
		if s.Duration != "0s" && s.Duration != "" {
			bound += " or " + s.Duration
		}
	}
	if len(rep.Keyed) == 0 {
		out = append(out, fmt.Sprintf("load per strategy: %s for %s, workers %d..%d, timeout %s", load, bound, s.Workers, s.MaxWorkers, s.Timeout),
			fmt.Sprintf("stock: %d per sku, %d sku(s) (skew %g), qty %d per request", s.Stock, s.SKUs, s.Skew, s.Qty))
	}
	if s.RMWDelay != "" {
		out = append(out, "replicas' read-modify-write delay: "+s.RMWDelay)
	}
	if len(s.Faults) > 0 {
		out = append(out, fmt.Sprintf("fault drills: %s, %d repeat(s); replicas' lock TTL %s, write stall %s", strings.Join(s.Faults, ", "), s.Repeat, s.FaultTTL, s.WriteStall))
	}
	if len(s.Thresholds) > 0 {
		out = append(out, "thresholds: "+strings.Join(s.Thresholds, ", "))
	}
	return append(out, fmt.Sprintf("wall time: %.1fs", rep.WallSeconds))
}

// WriteMarkdown writes the report as a Markdown page: the verdict, the
// settings, the table of the run's mode, the problems each run found and
// the checks.
func WriteMarkdown(w io.Writer, rep Report) error {
	var b strings.Builder
	word, sentence := rep.Headline()
	fmt.Fprintf(&b, "# stocklock load test, %s\n\n**Result: %s.** %s%s.\n\n", rep.Started.Format("2006-01-02 15:04:05 MST"), word, strings.ToUpper(sentence[:1]), sentence[1:])
	for _, f := range rep.facts() {
		fmt.Fprintf(&b, "- %s\n", f)
	}
	b.WriteString("\n")
	var err error
	for _, sec := range rep.sections() {
		if err == nil {
			err = sec.Markdown(&b, rep)
		}
	}
	writeCheckMarkdown(&b, rep.Checks())
	if _, werr := io.WriteString(w, b.String()); err == nil {
		err = werr
	}
	return err
}

// Section is a run mode's part of its report: its table (Text: the
// command line prints it, report.html shows it), its part of results.md
// and its chart, if any (SVG, into the file Chart). A scenario adds its
// own to Report.Sections.
type Section struct {
	Text     func(io.Writer, Report) error
	Markdown func(*strings.Builder, Report) error
	Chart    string
	SVG      func(io.Writer, Report) error
}

// The sections of the harness's run modes.
var (
	CompareSection = Section{func(w io.Writer, rep Report) error {
		if err := WriteTable(w, rep.Runs); err != nil {
			return err
		}
		return WriteShards(w, rep.Runs)
	}, writeCompareMarkdown, ChartFile, WriteSVG}
	FaultSection = Section{func(w io.Writer, rep Report) error { return WriteFaultTable(w, FaultRows(rep.Runs)) }, func(b *strings.Builder, rep Report) error {
		b.WriteString("![fault drills](" + FaultChartFile + ")\n\n")
		return WriteFaultMarkdown(b, rep.Runs)
	}, FaultChartFile, WriteFaultSVG}
	CapacitySection = Section{func(w io.Writer, rep Report) error { return WriteCapacityTable(w, CapacityRows(rep.Runs)) },
		writeCapacityMarkdown, CapacityChartFile, WriteCapacitySVG}
	KeyedSection = Section{Text: func(w io.Writer, rep Report) error { return WriteKeyedTable(w, rep.Keyed) },
		Markdown: func(b *strings.Builder, rep Report) error { return WriteKeyedMarkdown(b, rep.Keyed) }}
	SoakSection = Section{func(w io.Writer, rep Report) error {
		fmt.Fprintln(w)
		return WriteSoakTable(w, *rep.Soak)
	}, func(b *strings.Builder, rep Report) error {
		b.WriteString("\n## Soak: the replicas' resources\n\n```\n")
		err := WriteSoakTable(b, *rep.Soak)
		fmt.Fprintf(b, "```\n\n![soak](%s)\n", SoakChartFile)
		return err
	}, SoakChartFile, func(w io.Writer, rep Report) error { return WriteSoakSVG(w, *rep.Soak) }}
)

func (rep Report) sections() []Section {
	if len(rep.Sections) == 0 {
		return []Section{CompareSection}
	}
	return rep.Sections
}

// writeCapacityMarkdown is the capacity sweep's part of results.md.
func writeCapacityMarkdown(b *strings.Builder, rep Report) error {
	fmt.Fprintf(b, "Limits of a step: %s.\n\n![capacity](%s)\n\n```\n", rep.Settings.CapacityLimit, CapacityChartFile)
	if err := WriteCapacityTable(b, CapacityRows(rep.Runs)); err != nil {
		return err
	}
	b.WriteString("```\n\nEvery step (bound: one over the mean time of the steps run under the lock, read, write and release; step times are means over the step, ms):\n\n| strategy | replicas | offered req/s | sales/s | bound | % of bound | p99 | errors | verdict | past the limits | step times |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |\n")
	for _, r := range rep.Runs {
		fmt.Fprintf(b, "| %s | %d | %d | %.1f | %s | %s | %s | %d | %s | %s | %s |\n", r.Strategy, r.ReplicaCount, r.TargetRate, r.SalesPerSec, r.BoundText(), r.BoundShare(), Ms(r.Latency.P99), r.Errors(), r.Verdict, r.Saturated, r.StepsText())
	}
	return nil
}

// writeCompareMarkdown is the comparison's part of results.md: its table
// and notes.
func writeCompareMarkdown(b *strings.Builder, rep Report) error {
	rows := [][]string{header}
	for _, r := range rep.Runs {
		cells := row(r)
		if len(r.Violations) > 0 {
			cells[2] = fmt.Sprintf("[%s](%s)", cells[2], r.Violations[0])
		}
		rows = append(rows, cells)
	}
	writeMarkdownTable(b, rows, func(col int) bool { return col < 3 })
	b.WriteString(`
Columns: *linearizable* says whether the run's history (every request's
call, return and answer, and periodic reads) could have happened on one
correct inventory item (yes), could not (no, linked to the picture of the
violation), or the checker ran out of time (unknown);
*sold* is units acknowledged by 200 responses; *oversold* is
max(0, sold − stock, −remaining); *lost upd* is acknowledged units that the
stock does not reflect, sold − (stock − remaining); *ledger≠* counts orders
that differ between the ledger and the 200 responses; *false s/o* counts
sold_out answers for a qty that the stock left at the end still covered
(the stock only falls during a run, so it covered it then too); *sales/s* is the rate
at which sales completed while the stock lasted (95% of the sales over the
time from the attack's start until they had completed);
*req/s* is the request rate achieved; latencies cover every request, sales
and refusals alike; *lock wait p99* is estimated from the replicas'
` + "`stock_lock_wait_seconds`" + ` histograms over the run (acquired or not).
`)
	writeShardMarkdown(b, rep.Runs)
	b.WriteString("\n![strategies compared](chart.svg)\n")
	for _, r := range rep.Runs {
		writeOutcomes(b, r)
	}
	var notes strings.Builder
	for _, r := range rep.Runs {
		if len(r.Problems) == 0 && len(r.ErrorSample) == 0 {
			continue
		}
		fmt.Fprintf(&notes, "\n### %s (%s)\n\n", r.Strategy, r.Verdict)
		for _, p := range r.Problems {
			fmt.Fprintf(&notes, "- %s\n", p)
		}
		for _, v := range r.Violations {
			fmt.Fprintf(&notes, "- not linearizable: [picture of the violation](%s), history in [%s](%s)\n", v, r.History, r.History)
		}
		for _, e := range r.ErrorSample {
			fmt.Fprintf(&notes, "- refusal or error seen: `%s`\n", strings.ReplaceAll(e, "`", "'"))
		}
	}
	if notes.Len() > 0 {
		b.WriteString("\n## Findings\n")
		b.WriteString(notes.String())
	}
	var plots []string
	for _, r := range rep.Runs {
		if r.Plot != "" {
			plots = append(plots, fmt.Sprintf("[%s](%s)", r.Strategy, r.Plot))
		}
	}
	if len(plots) > 0 {
		fmt.Fprintf(b, "\nLatency plots (Vegeta): %s\n", strings.Join(plots, ", "))
	}
	return nil
}

// Files are the names WriteFiles writes inside the output directory.
const (
	JSONFile     = "results.json"
	MarkdownFile = "results.md"
	ChartFile    = "chart.svg"
)

// file is one file of a report: its name and how to write it.
type file struct {
	name  string
	write func(io.Writer, Report) error
}

// charts are the pictures of rep's sections.
func (rep Report) charts() []file {
	var out []file
	for _, sec := range rep.sections() {
		if sec.Chart != "" {
			out = append(out, file{sec.Chart, sec.SVG})
		}
	}
	return out
}

// WriteFiles writes results.json, results.md, the charts and report.html
// into dir and returns their paths.
func WriteFiles(dir string, rep Report) ([]string, error) {
	files := append([]file{{JSONFile, WriteJSON}, {MarkdownFile, WriteMarkdown}}, rep.charts()...)
	var paths []string
	for _, wr := range append(files, file{HTMLFile, WriteHTML}) {
		p := filepath.Join(dir, wr.name)
		f, err := os.Create(p)
		if err != nil {
			return paths, err
		}
		err = wr.write(f, rep)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return paths, fmt.Errorf("write %s: %w", p, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// writeOutcomes writes a mixed run's requests by strategy and outcome as a
// table: which writers sold, and which were refused and why.
func writeOutcomes(b *strings.Builder, r Run) {
	if len(r.Outcomes) == 0 {
		return
	}
	var kinds []string
	for _, s := range r.Strategies {
		for k := range r.Outcomes[s] {
			if !slices.Contains(kinds, k) {
				kinds = append(kinds, k)
			}
		}
	}
	slices.Sort(kinds)
	fmt.Fprintf(b, "\n### %s: requests by strategy and outcome\n\n| strategy | %s |\n| --- |%s\n",
		r.Strategy, strings.Join(kinds, " | "), strings.Repeat(" ---: |", len(kinds)))
	for _, s := range r.Strategies {
		cells := []string{s}
		for _, k := range kinds {
			cells = append(cells, fmt.Sprint(r.Outcomes[s][k]))
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
}

// WriteText writes the tables a person compares the runs by, those of
// rep's sections. The command line prints them and the live page shows
// them.
func WriteText(w io.Writer, rep Report) error {
	for _, sec := range rep.sections() {
		if err := sec.Text(w, rep); err != nil {
			return err
		}
	}
	return nil
}
