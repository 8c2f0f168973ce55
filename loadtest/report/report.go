// Package report turns the load-test runs into terminal tables, JSON,
// Markdown, SVG charts and one HTML page.
package report

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
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
	Strategy string          `json:"strategy"`
	Safe     bool            `json:"safe"`
	Verdict  string          `json:"verdict"`
	Checks   []verdict.Check `json:"checks,omitempty"` // the decisions on the run, the verdict's source

	SKUs  []string `json:"skus"`
	Stock int      `json:"stock_per_sku"`
	Qty   int      `json:"qty"`

	Requests    int `json:"requests"`     // decrement requests sent, split by class below
	Orders      int `json:"orders"`       // 200 responses
	SoldOut     int `json:"sold_out"`     // 409 sold_out
	Unavailable int `json:"unavailable"`  // 503
	Other       int `json:"other_status"` // any other status
	Transport   int `json:"transport_errors"`

	verdict.Totals     // the verdict's arithmetic: units sold, oversold, lost, ...
	LedgerOrders   int `json:"ledger_orders"`

	// AttackSeconds runs from the first request to the last response,
	// SellingSeconds to the last 200's: the window of the sales.
	AttackSeconds  float64 `json:"attack_seconds"`
	SellingSeconds float64 `json:"selling_seconds"`
	// SalesPerSec is 95% of the sales (all, under 20) over the time from
	// the attack's start until that many had completed: a run that sells
	// out early is not diluted by its sold-out tail, nor stretched by one
	// straggler, and the rate cannot exceed the offered one.
	SalesPerSec float64 `json:"sales_per_sec"`
	ReqPerSec   float64 `json:"req_per_sec"` // over the whole attack
	TargetRate  int     `json:"target_rate"` // the rate asked for (0: as fast as the workers allow)

	Latency Latency `json:"latency"`
	// LockWaitP99 is the p99 of the replicas' lock wait histogram over the
	// run, in ms; nil without a lock or such a metric.
	LockWaitP99 *float64 `json:"lock_wait_p99_ms,omitempty"`

	// Fault drills only (see FaultRow): the fault as the tables name it,
	// which repeat this was, and what was done.
	Fault     string `json:"fault,omitempty"`
	Repeat    int    `json:"repeat,omitempty"`
	Demo      bool   `json:"demo,omitempty"` // a safe strategy deliberately weakened (fencing off, redis-stock acknowledging after Redis)
	FaultNote string `json:"fault_note,omitempty"`
	// FaultAt is when the fault struck, in seconds into the attack, and
	// RecoverySeconds how long after it sales resumed; nil when none
	// struck or sales did not resume within the attack. Injected is true
	// when the fault was injected (not skipped, not a configuration).
	FaultAt         *float64 `json:"fault_at_s,omitempty"`
	RecoverySeconds *float64 `json:"recovery_seconds,omitempty"`
	Injected        bool     `json:"injected,omitempty"`
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
	// Capacity sweeps of lock strategies only: the mean time in ms of each
	// step of a sale over the step's window, from the replicas'
	// stock_sale_step_seconds, and the bound they put on one hot item's
	// sales/s (see Bound). Nil when the replicas export no step times.
	StepMs      map[string]float64 `json:"sale_step_ms,omitempty"`
	BoundPerSec *float64           `json:"bound_sales_per_sec,omitempty"`

	// Strategies are those of a mixed run (Strategy "mixed"), decrementing
	// the same skus at once; Outcomes counts its requests by outcome.
	Strategies []string                  `json:"strategies,omitempty"`
	Outcomes   map[string]map[string]int `json:"outcomes_by_strategy,omitempty"`

	// The history and its linearizability check: yes, no or unknown (the
	// checker ran out of time); Conflicts says, per violating sku, which
	// operations no order reconciles, Violations are their pictures.
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
	Unrecorded     int `json:"unrecorded,omitempty"` // see verdict.Result.Unrecorded

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

// Errors counts the requests neither a sale, nor sold out, nor a 503.
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
	Faults        []string `json:"faults,omitempty"`
	Repeat        int      `json:"repeat,omitempty"`
	FaultTTL      string   `json:"fault_ttl,omitempty"`
	WriteStall    string   `json:"write_stall,omitempty"`
	CapacityLimit string   `json:"capacity_limit,omitempty"` // capacity sweeps only: the limits a step must stay within
	Thresholds    []string `json:"thresholds,omitempty"`     // as the user set them
}

// Report is everything a harness run produced.
type Report struct {
	Started     time.Time `json:"started"`
	OutDir      string    `json:"out_dir"`
	WallSeconds float64   `json:"wall_seconds"`
	Host        string    `json:"host"`
	// The MongoDB, Redis and etcd the replicas used, when the harness
	// started them; empty for external replicas.
	Store    string        `json:"store,omitempty"`
	Redis    string        `json:"redis,omitempty"`
	Etcd     string        `json:"etcd,omitempty"`
	Replicas []string      `json:"replicas"`
	Settings Settings      `json:"settings"`
	Runs     []Run         `json:"runs"`
	Keyed    []KeyedRun    `json:"keyed,omitempty"`    // the keyed drill's runs (it has no Runs)
	Checkout []CheckoutRun `json:"checkout,omitempty"` // the checkout scenario's runs (it has no Runs)
	Flash    []FlashRun    `json:"flash,omitempty"`    // the flash sale's runs (it has no Runs)
	Soak     *Soak         `json:"soak,omitempty"`     // a soak's samples; its segments are Runs
	Sections []Section     `json:"-"`                  // the run mode's parts of the report; none is the comparison's
	OK       bool          `json:"ok"`                 // the run finished and no check failed it
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

// Checks is the one list of the run's checks, each with its scope.
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
	for _, f := range rep.Flash {
		add(f.Scope(), f.Checks)
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

func orDash(v *float64, f func(float64) string) string {
	if v == nil {
		return "-"
	}
	return f(*v)
}

var compareHeader = []string{"strategy", "verdict", "linearizable", "requests", "sold", "sold out", "503", "errors",
	"oversold", "lost upd", "ledger≠", "false s/o", "sales/s", "req/s", "p50", "p95", "p99", "max", "lock wait p99"}

func rowsOf[T any](header []string, items []T, cells func(T) []string) [][]string {
	rows := [][]string{header}
	for _, it := range items {
		rows = append(rows, cells(it))
	}
	return rows
}

// groupBy groups the items key keeps by their key, in the order each key
// first appears.
func groupBy[T any](items []T, key func(T) (string, bool)) [][]T {
	var groups [][]T
	index := map[string]int{}
	for _, it := range items {
		k, keep := key(it)
		if !keep {
			continue
		}
		i, ok := index[k]
		if !ok {
			i = len(groups)
			index[k] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], it)
	}
	return groups
}

// table writes rows of cells (the header first) as columns two spaces
// apart, padded to the widest cell, or with md as a Markdown table with a
// failure in bold. Columns where left is true hold text, aligned left; the
// others hold numbers, aligned right.
func table(b *strings.Builder, md bool, rows [][]string, left func(col int) bool) {
	width := make([]int, len(rows[0]))
	for _, cells := range rows {
		for i, c := range cells {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	for i, row := range rows {
		cells := slices.Clone(row)
		for j, c := range cells {
			pad := strings.Repeat(" ", width[j]-utf8.RuneCountInString(c))
			switch {
			case md && i > 0 && (c == string(verdict.Fail) || c == "breached"):
				cells[j] = "**" + c + "**"
			case !md && left(j):
				cells[j] = c + pad
			case !md:
				cells[j] = pad + c
			}
		}
		if !md {
			b.WriteString(strings.Join(cells, "  ") + "\n")
			continue
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

// flush writes to w at once what write writes.
func flush(w io.Writer, write func(*strings.Builder)) error {
	var b strings.Builder
	write(&b)
	_, err := io.WriteString(w, b.String())
	return err
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
	if len(rep.Keyed) == 0 && len(rep.Flash) == 0 { // the keyed drill and the flash sale say their own load
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
// settings, the sections and the checks.
func WriteMarkdown(w io.Writer, rep Report) error {
	return flush(w, func(b *strings.Builder) {
		word, sentence := rep.Headline()
		fmt.Fprintf(b, "# stocklock load test, %s\n\n**Result: %s.** %s%s.\n\n", rep.Started.Format("2006-01-02 15:04:05 MST"), word, strings.ToUpper(sentence[:1]), sentence[1:])
		for _, f := range rep.facts() {
			fmt.Fprintf(b, "- %s\n", f)
		}
		b.WriteString("\n")
		for _, sec := range rep.sections() {
			sec.Write(b, rep, true)
		}
		if checks := rep.Checks(); len(checks) > 0 {
			b.WriteString("\n## Checks\n\nEvery decision on the run: a failed *safety* check fails it (exit status 1), a breached *threshold* too (exit status 3); a *demonstration* is an unsafe strategy's race shown, a *limit* a capacity step past its limits. Checks that passed everywhere share a row.\n\n")
			table(b, true, append([][]string{checkHeader}, CheckRows(checks)...), func(int) bool { return true })
		}
	})
}

// Section is a run mode's part of its report: Write writes its tables
// (the command line prints them, report.html shows them) or, with md, its
// part of results.md; Draw draws its chart, if any, as SVG into the file
// Chart. A scenario adds its own to Report.Sections.
type Section struct {
	Write func(b *strings.Builder, rep Report, md bool)
	Chart string
	Draw  func(b *strings.Builder, rep Report)
}

var (
	CompareSection  = Section{writeCompare, ChartFile, drawCompare}
	FaultSection    = Section{writeFaults, FaultChartFile, drawFaults}
	CapacitySection = Section{writeCapacity, CapacityChartFile, drawCapacity}
	KeyedSection    = Section{Write: writeKeyed}
	SoakSection     = Section{writeSoak, SoakChartFile, drawSoak}
	CheckoutSection = Section{Write: writeCheckout}
	FlashSection    = Section{writeFlash, FlashChartFile, drawFlash}
)

func (rep Report) sections() []Section {
	if len(rep.Sections) == 0 {
		return []Section{CompareSection}
	}
	return rep.Sections
}

// writeCompare writes the comparison's table and the runs' load by shard;
// the Markdown adds the columns explained, the violations linked, the
// chart, a mixed run's outcomes, the findings and the latency plots.
func writeCompare(b *strings.Builder, rep Report, md bool) {
	table(b, md, rowsOf(compareHeader, rep.Runs, func(r Run) []string {
		// yes, no (in Markdown linked to its picture), unknown, or "-" without a checked history
		lin := cmp.Or(r.Linearizable, "-")
		if md && len(r.Violations) > 0 {
			lin = fmt.Sprintf("[%s](%s)", lin, r.Violations[0])
		}
		return []string{
			r.Strategy, r.Verdict, lin,
			fmt.Sprint(r.Requests), fmt.Sprint(r.Sold), fmt.Sprint(r.SoldOut), fmt.Sprint(r.Unavailable),
			fmt.Sprint(r.Errors()), fmt.Sprint(r.Oversold), fmt.Sprint(r.LostUpdates), fmt.Sprint(r.LedgerMismatch),
			fmt.Sprint(r.FalseSoldOut), fmt.Sprintf("%.1f", r.SalesPerSec), fmt.Sprintf("%.1f", r.ReqPerSec),
			Ms(r.Latency.P50), Ms(r.Latency.P95), Ms(r.Latency.P99), Ms(r.Latency.Max), orDash(r.LockWaitP99, Ms),
		}
	}), func(col int) bool { return col < 3 })
	if md {
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
	}
	writeShards(b, rep.Runs, md)
	if !md {
		return
	}
	b.WriteString("\n![strategies compared](chart.svg)\n")
	var notes strings.Builder // the findings, after every run's outcomes
	var plots []string
	for _, r := range rep.Runs {
		writeOutcomes(b, r)
		if r.Plot != "" {
			plots = append(plots, fmt.Sprintf("[%s](%s)", r.Strategy, r.Plot))
		}
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
		b.WriteString("\n## Findings\n" + notes.String())
	}
	if len(plots) > 0 {
		fmt.Fprintf(b, "\nLatency plots (Vegeta): %s\n", strings.Join(plots, ", "))
	}
}

// writeShards writes each Redis Cluster run's load by master (which
// shards its locks landed on), masters in address order.
func writeShards(b *strings.Builder, runs []Run, md bool) {
	for _, r := range runs {
		if len(r.SKUsByShard) == 0 {
			continue
		}
		total, sold := 0, 0
		for _, n := range r.SalesByShard {
			total += n
			sold += min(n, 1)
		}
		rows := [][]string{{"master", "skus", "requests", "sales", "share of sales"}}
		for _, m := range slices.Sorted(maps.Keys(r.SKUsByShard)) {
			share := "-"
			if total > 0 {
				share = fmt.Sprintf("%.0f%%", 100*float64(r.SalesByShard[m])/float64(total))
			}
			rows = append(rows, []string{m, fmt.Sprint(r.SKUsByShard[m]), fmt.Sprint(r.RequestsByShard[m]), fmt.Sprint(r.SalesByShard[m]), share})
		}
		if md {
			fmt.Fprintf(b, "\n### %s on the Redis Cluster, by master\n\nEach sku's lock key lives in the slot of its hash tag, on one master: %d of %d shards sold.\n\n", r.Strategy, sold, len(rows)-1)
		} else {
			fmt.Fprintf(b, "\n%s on the Redis Cluster, by master (its lock keys' slots): %d of %d shards sold\n", r.Strategy, sold, len(rows)-1)
		}
		table(b, md, rows, func(col int) bool { return col == 0 })
	}
}

// writeOutcomes writes a mixed run's requests by strategy and outcome as a
// table: which writers sold, and which were refused and why.
func writeOutcomes(b *strings.Builder, r Run) {
	if len(r.Outcomes) == 0 {
		return
	}
	all := map[string]int{}
	for _, s := range r.Strategies {
		maps.Copy(all, r.Outcomes[s])
	}
	kinds := slices.Sorted(maps.Keys(all))
	fmt.Fprintf(b, "\n### %s: requests by strategy and outcome\n\n", r.Strategy)
	table(b, true, rowsOf(append([]string{"strategy"}, kinds...), r.Strategies, func(s string) []string {
		cells := []string{s}
		for _, k := range kinds {
			cells = append(cells, fmt.Sprint(r.Outcomes[s][k]))
		}
		return cells
	}), func(col int) bool { return col == 0 })
}

// Files are the names WriteFiles writes inside the output directory.
const (
	JSONFile     = "results.json"
	MarkdownFile = "results.md"
	ChartFile    = "chart.svg"
)

type file struct {
	name  string
	write func(io.Writer, Report) error
}

func (rep Report) charts() []Section {
	return slices.DeleteFunc(slices.Clone(rep.sections()), func(sec Section) bool { return sec.Chart == "" })
}

// WriteFiles writes results.json, results.md, the charts and report.html
// into dir and returns their paths.
func WriteFiles(dir string, rep Report) ([]string, error) {
	files := []file{{JSONFile, WriteJSON}, {MarkdownFile, WriteMarkdown}}
	for _, sec := range rep.charts() {
		files = append(files, file{sec.Chart, func(w io.Writer, rep Report) error {
			return flush(w, func(b *strings.Builder) { sec.Draw(b, rep) })
		}})
	}
	var paths []string
	for _, wr := range append(files, file{HTMLFile, WriteHTML}) {
		p := filepath.Join(dir, wr.name)
		f, err := os.Create(p)
		if err != nil {
			return paths, err
		}
		if err := errors.Join(wr.write(f, rep), f.Close()); err != nil {
			return paths, fmt.Errorf("write %s: %w", p, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// WriteText writes the tables of rep's sections, which the command line
// prints and the live page shows.
func WriteText(w io.Writer, rep Report) error {
	return flush(w, func(b *strings.Builder) {
		for _, sec := range rep.sections() {
			sec.Write(b, rep, false)
		}
	})
}

// HTMLFile is the report as one page that opens offline.
const HTMLFile = "report.html"

// maxHTML is the most report.html may weigh: pictures past it are linked.
const maxHTML = 2 << 20

var checkHeader = []string{"result", "kind", "check", "scope", "observed", "bound"}

// CheckRows are checks as rows of checkHeader's cells: each failed check
// and each threshold on a row of its own, then one row for the checks of a
// name, kind and bound that passed everywhere, with their scopes and figures.
func CheckRows(checks []verdict.Check) [][]string {
	var rows [][]string
	for _, c := range checks {
		if !c.Pass || c.Kind == verdict.Threshold {
			rows = append(rows, []string{c.Result(), string(c.Kind), c.Name, c.Scope, c.Observed, c.Bound})
		}
	}
	for _, g := range groupBy(checks, func(c verdict.Check) (string, bool) {
		return c.Name + "\x00" + string(c.Kind) + "\x00" + c.Bound, c.Pass && c.Kind != verdict.Threshold
	}) {
		var scopes, seen []string
		for _, c := range g {
			scopes = append(scopes, c.Scope)
			if !slices.Contains(seen, c.Observed) {
				seen = append(seen, c.Observed)
			}
		}
		scope, figures := strings.Join(scopes, ", "), strings.Join(seen, ", ")
		if len(scopes) > 3 {
			scope = fmt.Sprintf("all %d", len(scopes))
		}
		if len(seen) > 3 {
			figures = fmt.Sprintf("%d different figures", len(seen))
		}
		rows = append(rows, []string{"pass", string(g[0].Kind), g[0].Name, scope, figures, g[0].Bound})
	}
	return rows
}

// WriteHTML writes the report as one page with everything inline (nothing
// outside it is referenced but links to files beside it): the verdict, the
// tables, the charts, the checks, the fault timeline and the pictures of
// the histories that are not linearizable, read from rep.OutDir (each
// embedded while the page stays under maxHTML, else linked).
func WriteHTML(w io.Writer, rep Report) error {
	var b strings.Builder
	word, sentence := rep.Headline()
	fmt.Fprintf(&b, `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>stocklock load test, %s</title><style>
body{font:14px system-ui,sans-serif;margin:2em;max-width:1200px}pre{font-size:12px;overflow-x:auto}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}.pass{color:#2e7d32}.demonstrated{color:#e65100}.FAIL,.breached,.FAIL td,.breached td{color:#c62828;font-weight:bold}
iframe{width:100%%;height:480px;border:1px solid #ccc}</style></head><body>
<h1>stocklock load test, %[1]s</h1><p class="%s"><b>%s</b>: %s.</p><ul>`, esc(rep.Started.Format("2006-01-02 15:04:05 MST")), map[bool]string{true: "pass", false: "FAIL"}[word == "PASS"], esc(word), esc(sentence))
	for _, f := range rep.facts() {
		fmt.Fprintf(&b, "<li>%s</li>", esc(f))
	}
	var table strings.Builder
	_ = WriteText(&table, rep)
	fmt.Fprintf(&b, "</ul><h2>Results</h2><pre>%s</pre>", esc(table.String()))
	for _, sec := range rep.charts() {
		var svg strings.Builder
		sec.Draw(&svg, rep)
		// Inline SVG needs no namespace: the page names no URL at all.
		fmt.Fprintf(&b, "<figure>%s</figure>", strings.Replace(svg.String(), ` xmlns="http://www.w3.org/2000/svg"`, "", 1))
	}
	b.WriteString("<h2>Checks</h2><table><tr><th>" + strings.Join(checkHeader, "</th><th>") + "</th></tr>")
	for _, r := range CheckRows(rep.Checks()) {
		for i := range r {
			r[i] = esc(r[i])
		}
		fmt.Fprintf(&b, `<tr class="%s"><td>%s</td></tr>`, r[0], strings.Join(r, "</td><td>"))
	}
	b.WriteString("</table>")
	writeTimeline(&b, rep)
	var pics strings.Builder
	for _, r := range rep.Runs {
		for _, v := range r.Violations {
			page, err := os.ReadFile(filepath.Join(rep.OutDir, v))
			srcdoc := esc(string(page))
			fmt.Fprintf(&pics, "<h3>%s: %s</h3>", esc(r.Scope()), esc(v))
			if err != nil || b.Len()+pics.Len()+len(srcdoc) > maxHTML-64<<10 {
				fmt.Fprintf(&pics, `<p>Too large to embed: <a href="%s">%[1]s</a>, beside this page.</p>`, esc(v))
				continue
			}
			fmt.Fprintf(&pics, `<iframe title="%s" srcdoc="%s"></iframe>`, esc(v), srcdoc)
		}
	}
	if pics.Len() > 0 {
		b.WriteString("<h2>Histories that are not linearizable</h2>" + pics.String())
	}
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeTimeline draws when each fault struck in its run and how long
// sales took to resume, and lists what the keyed drill did.
func writeTimeline(b *strings.Builder, rep Report) {
	var runs []Run
	end := 1.0
	for _, r := range rep.Runs {
		if r.FaultAt != nil {
			runs = append(runs, r)
			end = max(end, r.AttackSeconds)
		}
	}
	if len(runs) == 0 && len(rep.Keyed) == 0 {
		return
	}
	b.WriteString("<h2>Fault timeline</h2>")
	const labelW, barW, rowH = 330, 600, 18
	x := func(s float64) float64 { return labelW + s/end*barW }
	if len(runs) > 0 {
		fmt.Fprintf(b, `<p>Each run's attack (grey), the moment its fault struck (red) and, from there, a bar as long as the longest gap in sales after it (orange).</p><svg width="%d" height="%d" font-size="11">`, labelW+barW+160, rowH*len(runs)+20)
		for i, r := range runs {
			y := i * rowH
			fmt.Fprintf(b, `<text x="0" y="%d">%s</text><rect x="%d" y="%d" width="%.1f" height="10" fill="#ddd"/>`, y+11, esc(clip(r.Scope(), 52)), labelW, y+2, x(r.AttackSeconds)-labelW)
			rec := "sales did not resume"
			if r.RecoverySeconds != nil {
				rec = fmt.Sprintf("%.2fs", *r.RecoverySeconds)
				fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="10" fill="#ef6c00"/>`, x(*r.FaultAt), y+2, x(*r.FaultAt+*r.RecoverySeconds)-x(*r.FaultAt))
			}
			fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="2" height="14" fill="#c62828"/><text x="%d" y="%d">%s</text>`, x(*r.FaultAt), y, labelW+barW+6, y+11, rec)
		}
		fmt.Fprintf(b, `<text x="%d" y="%d">0s</text><text x="%d" y="%d">%.0fs</text></svg><ul>`, labelW, rowH*len(runs)+14, labelW+barW-20, rowH*len(runs)+14, end)
		for _, r := range runs {
			fmt.Fprintf(b, "<li>%s, %.2fs in: %s</li>", esc(r.Scope()), *r.FaultAt, esc(r.FaultNote))
		}
		b.WriteString("</ul>")
	}
	for _, k := range rep.Keyed {
		fmt.Fprintf(b, "<h3>Keyed run %d</h3><ul>", k.Repeat)
		for _, f := range k.Faults {
			fmt.Fprintf(b, "<li>%s</li>", esc(f))
		}
		b.WriteString("</ul>")
	}
}
