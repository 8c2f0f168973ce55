package report

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stocklock/stocklock/loadtest/verdict"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// Threshold is a bound a user sets on a figure of every run, or of one
// strategy's runs, as k6 users write them (see ParseThreshold).
type Threshold struct {
	Strategy string  // "" : every run
	Metric   string  // one of Metrics
	Op       string  // <, <=, >, >=, ==, !=
	Bound    float64 // in the metric's unit: ms for a latency
	bound    string  // the bound as given; "" for a Threshold built in code
}

// metric is a figure of a Run that a threshold can bound; value is NaN
// for a run that lacks it.
type metric struct {
	name, doc string
	ms        bool // a latency: the bound takes a unit (300ms, 1.5s); a bare number is ms
	value     func(Run) float64
}

var metrics = []metric{
	{"p50", "latency p50", true, func(r Run) float64 { return r.Latency.P50 }},
	{"p95", "latency p95", true, func(r Run) float64 { return r.Latency.P95 }},
	{"p99", "latency p99", true, func(r Run) float64 { return r.Latency.P99 }},
	{"max", "slowest answer", true, func(r Run) float64 { return r.Latency.Max }},
	{"lock_wait_p99", "the replicas' lock wait p99 (runs that measured one)", true, func(r Run) float64 {
		return *cmp.Or(r.LockWaitP99, &nan)
	}},
	{"recovery", "time until sales resumed after the fault (drills whose fault struck; never resumed: breached)", true, func(r Run) float64 {
		if !r.Injected {
			return nan
		}
		return 1000 * *cmp.Or(r.RecoverySeconds, &inf)
	}},
	{"sales_per_s", "sales/s while the stock lasted", false, func(r Run) float64 { return r.SalesPerSec }},
	{"req_per_s", "requests/s achieved", false, func(r Run) float64 { return r.ReqPerSec }},
	{"sold", "units sold", false, func(r Run) float64 { return float64(r.Sold) }},
	{"errors", "answers that were neither a sale, nor sold out, nor a 503", false, func(r Run) float64 { return float64(r.Errors()) }},
	{"unavailable", "503 answers", false, func(r Run) float64 { return float64(r.Unavailable) }},
	{"error_rate", "errors and 503s as a share of the requests (0.01 is 1%)", false, func(r Run) float64 {
		return float64(r.Errors()+r.Unavailable) / float64(max(r.Requests, 1))
	}},
	{"oversold", "units oversold", false, func(r Run) float64 { return float64(r.Oversold) }},
	{"lost_updates", "lost updates", false, func(r Run) float64 { return float64(r.LostUpdates) }},
	{"ledger_mismatch", "ledger mismatches", false, func(r Run) float64 { return float64(r.LedgerMismatch) }},
	{"false_sold_out", "false sold-outs", false, func(r Run) float64 { return float64(r.FalseSoldOut) }},
	{"double_sold", "units sold twice for one key", false, func(r Run) float64 { return float64(r.DoubleSold) }},
}

var nan, inf = math.NaN(), math.Inf(1)

// Metrics describes the figures a threshold can bound, one per line.
func Metrics() string {
	var b strings.Builder
	for _, m := range allMetrics() {
		fmt.Fprintf(&b, "  %-16s %s\n", m.name, m.doc)
	}
	return b.String()
}

// ops are the comparisons, two-character ones first.
var ops = []string{"<=", ">=", "==", "!=", "<", ">"}

// ParseThreshold reads [strategy:]metric op value: p99<300ms,
// sales_per_s>=150, atomic:oversold==0.
func ParseThreshold(s string) (Threshold, error) {
	var t Threshold
	text := strings.ReplaceAll(s, " ", "")
	i := strings.IndexAny(text, "<>=!")
	if i <= 0 {
		return t, fmt.Errorf("threshold %q: want [strategy:]metric op value, such as p99<300ms or atomic:sales_per_s>=150", s)
	}
	if j := slices.IndexFunc(ops, func(op string) bool { return strings.HasPrefix(text[i:], op) }); j >= 0 {
		t.Op = ops[j]
	}
	name, value := text[:i], text[i+len(t.Op):]
	if t.Op == "" || value == "" {
		return t, fmt.Errorf("threshold %q: want one of %s between the metric and a value", s, strings.Join(ops, " "))
	}
	if st, m, ok := strings.Cut(name, ":"); ok {
		if !strategy.Known(st) {
			return t, fmt.Errorf("threshold %q: unknown strategy %q (known: %s)", s, st, strings.Join(strategy.Names(), ", "))
		}
		t.Strategy, name = st, m
	}
	// k6 spells percentiles p(99).
	t.Metric = strings.NewReplacer("(", "", ")", "").Replace(name)
	m, ok := lookupMetric(t.Metric)
	if !ok {
		var names []string
		for _, m := range allMetrics() {
			names = append(names, m.name)
		}
		return t, fmt.Errorf("threshold %q: unknown metric %q (known: %s)", s, name, strings.Join(names, ", "))
	}
	t.bound = value
	var err error
	if t.Bound, err = strconv.ParseFloat(value, 64); err != nil && m.ms {
		var d time.Duration
		if d, err = time.ParseDuration(value); err == nil {
			t.Bound = float64(d) / float64(time.Millisecond)
		}
	}
	if err != nil {
		unit := map[bool]string{false: "a number", true: "a duration such as 300ms or 1.5s (a bare number is ms)"}[m.ms]
		return t, fmt.Errorf("threshold %q: %q is not %s", s, value, unit)
	}
	return t, nil
}

func allMetrics() []metric {
	all := slices.Clone(metrics)
	for _, m := range flashMetrics {
		all = append(all, m.metric)
	}
	return all
}

func lookupMetric(name string) (metric, bool) {
	for _, m := range allMetrics() {
		if m.name == name {
			return m, true
		}
	}
	return metric{}, false
}

// Known reports whether t names a metric of Metrics and a comparison
// ParseThreshold reads: a Threshold built in code may not.
func (t Threshold) Known() bool {
	_, ok := lookupMetric(t.Metric)
	return ok && slices.Contains(ops, t.Op)
}

// boundText is the bound as given, or as Bound says for a Threshold built
// in code.
func (t Threshold) boundText() string {
	return cmp.Or(t.bound, strconv.FormatFloat(t.Bound, 'g', -1, 64))
}

func (t Threshold) String() string {
	if t.Strategy != "" {
		return t.Strategy + ":" + t.Metric + t.Op + t.boundText()
	}
	return t.Metric + t.Op + t.boundText()
}

// Check judges run r against the threshold; false when it does not apply
// (another strategy's threshold, a figure the run lacks).
func (t Threshold) Check(r Run) (verdict.Check, bool) {
	m, ok := lookupMetric(t.Metric)
	if !ok || m.value == nil {
		return verdict.Check{}, false
	}
	v := m.value(r)
	if t.Strategy != "" && t.Strategy != r.Strategy || math.IsNaN(v) {
		return verdict.Check{}, false
	}
	return t.judge(m, v), true
}

func (t Threshold) judge(m metric, v float64) verdict.Check {
	pass := map[string]bool{"<": v < t.Bound, "<=": v <= t.Bound, ">": v > t.Bound, ">=": v >= t.Bound, "==": v == t.Bound, "!=": v != t.Bound}[t.Op]
	observed := strconv.FormatFloat(v, 'g', 4, 64)
	switch {
	case math.IsInf(v, 1):
		observed = "never"
	case m.ms:
		observed = Ms(v)
	}
	return verdict.Check{Name: t.Metric, Kind: verdict.Threshold, Observed: observed, Bound: t.Op + " " + t.boundText(), Pass: pass}
}
