package report

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/stocklock/stocklock/loadtest/verdict"
)

// FlashChartFile is the flash sale's chart.
const FlashChartFile = "flash.svg"

// The kinds of a flash-sale buyer's final answer, in the order the
// tables and charts show them.
const (
	KindSale        = "sale"        // 200
	KindSoldOut     = "sold out"    // 409 sold_out
	KindShed        = "shed"        // 503 overloaded: the service shed the request
	KindUnavailable = "unavailable" // any other 503
	KindTimedOut    = "timed out"   // no final answer within the buyer's patience
	KindError       = "error"       // anything else
)

// FlashKinds are the kinds of final answer, in order.
var FlashKinds = []string{KindSale, KindSoldOut, KindShed, KindUnavailable, KindTimedOut, KindError}

// FlashKind is the buyers whose final answer was of one kind, and the
// latency of that answer from their arrival.
type FlashKind struct {
	Kind    string       `json:"kind"`
	Buyers  int          `json:"buyers"`
	Latency FlashLatency `json:"latency"`
}

// FlashLatency is a latency distribution in milliseconds.
type FlashLatency struct {
	P50 float64 `json:"p50_ms"`
	P90 float64 `json:"p90_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

// FlashControl is what the control plane saw during the herd: a GET of
// the item and a /readyz of each replica about every 100 ms, and the
// replicas' counters over the run.
type FlashControl struct {
	AdminGets      int     `json:"admin_gets"`
	AdminFailures  int     `json:"admin_failures"`
	AdminP99       float64 `json:"admin_p99_ms"`
	AdminMax       float64 `json:"admin_max_ms"`
	Readyz         int     `json:"readyz"`
	ReadyzFailures int     `json:"readyz_failures"`
	// OwnProcess: the polls ran in a process of their own, not beside
	// the herd's client in the harness's.
	OwnProcess bool `json:"probe_own_process"`
	// From the logs of the replicas the harness started (Logged), over
	// the run: heartbeats that failed, recovery passes that failed, and
	// the times a replica found another dead (its heartbeat stood still).
	Logged           bool `json:"logged"`
	HeartbeatMisses  int  `json:"heartbeat_misses"`
	RecoveryFailures int  `json:"recovery_failures"`
	DeadFound        int  `json:"dead_found"`
	// From the replicas' /metrics, summed over them, over the run (they
	// export no heartbeat or recovery-pass series).
	RenewalFailures float64 `json:"lock_renewal_failures"`
	LeasesLost      float64 `json:"leases_lost"`
	RecoveredOrders float64 `json:"recovered_orders"`
}

// FlashRun is one strategy's flash sale (loadtest flash, docs/flash.md).
type FlashRun struct {
	Strategy    string  `json:"strategy"`
	Safe        bool    `json:"safe"`
	Shape       string  `json:"shape"`
	Buyers      int     `json:"buyers"`
	Over        string  `json:"over"`
	Patience    string  `json:"patience"`
	Retries     int     `json:"retries"`
	RetryBudget float64 `json:"retry_budget"`
	Qty         int     `json:"qty"`
	SKUs        int     `json:"skus"`
	Conns       int     `json:"conns_per_replica"` // 0: a connection per buyer in flight
	// A capacity sweep's steps past the knee only (loadtest capacity
	// --past-knee): the rate offered, on how many replicas.
	Offered  int `json:"offered_per_s,omitempty"`
	Replicas int `json:"replicas,omitempty"`

	Units       int `json:"units"`        // the stock, over the skus
	Sold        int `json:"sold"`         // units of the sales answered 200
	LedgerUnits int `json:"ledger_units"` // units of the ledger's orders
	Remaining   int `json:"remaining"`
	Attempts    int `json:"attempts"` // requests sent, retries included
	Retried     int `json:"retried"`  // of them, retries

	// SellOutSeconds runs from the first arrival to the last sale's
	// answer; nil when no sale was answered.
	SellOutSeconds *float64 `json:"sell_out_s,omitempty"`
	// Goodput is the sales answered within patience per second, over the
	// time from the first arrival to the last of them.
	Goodput       float64     `json:"goodput_per_s"`
	AnsweredShare float64     `json:"answered_share"` // buyers with a final answer within patience
	Kinds         []FlashKind `json:"kinds"`
	// ReplicaShedP99 is the p99 of the time the shed requests took in the
	// replicas' handlers (their stock_sales_shed_seconds over the run);
	// nil when none was shed or the replicas export no such histogram.
	// The buyers' shed latency is that plus the client, the kernel and
	// the waits for a connection and a CPU.
	ReplicaShedP99 *float64 `json:"replica_shed_p99_ms,omitempty"`
	// ShedReasons counts the replicas' shed requests over the run by
	// reason (stock_sales_shed_total: queue_full, queue_wait,
	// client_gone); nil when they export none.
	ShedReasons map[string]int `json:"shed_reasons,omitempty"`
	// DispatchLagP99 is the p99 of how late the harness sent buyers after
	// their due arrival: when it is far from 0, the machine could not
	// both make the herd and serve it, and every latency holds some of
	// that lag's cause (the buyers' latencies run from their actual
	// arrival).
	DispatchLagP99 float64 `json:"dispatch_lag_p99_ms"`

	// Fairness, by the ledger (a unit went to its buyer whether or not
	// the answer came within patience): the share of the units won by the
	// first 1% and 10% of the buyers by arrival, and Won[k] by the first
	// k+1 percent.
	First1  float64   `json:"first_1pct_share"`
	First10 float64   `json:"first_10pct_share"`
	Won     []float64 `json:"won_by_arrival_pct"`

	// Timeline counts the final answers of each kind (FlashKinds order)
	// by when they came, in bins of BinSeconds from the first arrival.
	BinSeconds float64  `json:"bin_s"`
	Timeline   [][6]int `json:"timeline"`

	Control FlashControl    `json:"control"`
	Checks  []verdict.Check `json:"checks"`
}

// Scope names the run in a list of checks.
func (r FlashRun) Scope() string {
	if r.Offered > 0 {
		return fmt.Sprintf("past the knee · %s, %d replicas, %d req/s", r.Strategy, r.Replicas, r.Offered)
	}
	return "flash · " + r.Strategy
}

// Kind is the run's buyers of a kind.
func (r FlashRun) Kind(kind string) FlashKind {
	if i := slices.IndexFunc(r.Kinds, func(k FlashKind) bool { return k.Kind == kind }); i >= 0 {
		return r.Kinds[i]
	}
	return FlashKind{Kind: kind}
}

// flashMetrics are the figures of a flash run thresholds can bound.
var flashMetrics = []struct {
	metric
	value func(FlashRun) float64
}{
	{metric{name: "units_sold", doc: "loadtest flash: units sold (answered 200)"}, func(r FlashRun) float64 { return float64(r.Sold) }},
	{metric{name: "goodput", doc: "loadtest flash: sales answered within patience per second"}, func(r FlashRun) float64 { return r.Goodput }},
	{metric{name: "answered_share", doc: "loadtest flash: share of buyers answered within patience (0.99 is 99%)"}, func(r FlashRun) float64 { return r.AnsweredShare }},
	{metric{name: "sell_out", doc: "loadtest flash: first arrival to the last sale (none: breached)", ms: true}, func(r FlashRun) float64 {
		return 1000 * *cmp.Or(r.SellOutSeconds, &inf)
	}},
	{metric{name: "sale_p99", doc: "loadtest flash: p99 of the sales' answers", ms: true}, func(r FlashRun) float64 { return r.Kind(KindSale).Latency.P99 }},
	{metric{name: "sold_out_p99", doc: "loadtest flash: p99 of the sold-out answers", ms: true}, func(r FlashRun) float64 { return r.Kind(KindSoldOut).Latency.P99 }},
	{metric{name: "shed_p99", doc: "loadtest flash: p99 of the shed answers (503 overloaded)", ms: true}, func(r FlashRun) float64 { return r.Kind(KindShed).Latency.P99 }},
	{metric{name: "replica_shed_p99", doc: "loadtest flash: p99 of the shed requests' time in the replicas' handlers (none: breached)", ms: true}, func(r FlashRun) float64 {
		return *cmp.Or(r.ReplicaShedP99, &inf)
	}},
	{metric{name: "timed_out", doc: "loadtest flash: buyers without an answer within patience", ms: false}, func(r FlashRun) float64 { return float64(r.Kind(KindTimedOut).Buyers) }},
	{metric{name: "admin_p99", doc: "loadtest flash: p99 of the control plane's GETs of the item during the herd", ms: true}, func(r FlashRun) float64 { return r.Control.AdminP99 }},
	{metric{name: "heartbeat_misses", doc: "loadtest flash: heartbeats the replicas logged as failed during the run"}, func(r FlashRun) float64 { return float64(r.Control.HeartbeatMisses) }},
	{metric{name: "readyz_failures", doc: "loadtest flash: /readyz polls that failed during the herd"}, func(r FlashRun) float64 { return float64(r.Control.ReadyzFailures) }},
	{metric{name: "first_10pct_share", doc: "loadtest flash: share of the units won by the first 10% of arrivals"}, func(r FlashRun) float64 { return r.First10 }},
}

// IsFlashMetric reports whether a threshold's metric is a flash run's.
func IsFlashMetric(name string) bool {
	return slices.ContainsFunc(flashMetrics, func(m struct {
		metric
		value func(FlashRun) float64
	}) bool {
		return m.name == name
	})
}

// CheckFlash judges flash run r against the threshold; false when it
// does not apply (another strategy's, not a flash metric).
func (t Threshold) CheckFlash(r FlashRun) (verdict.Check, bool) {
	for _, m := range flashMetrics {
		if m.name == t.Metric && (t.Strategy == "" || t.Strategy == r.Strategy) {
			return t.judge(m.metric, m.value(r)), true
		}
	}
	return verdict.Check{}, false
}

// Fairness is the share of the units won by the first 1% and 10% of n
// buyers by arrival, and by the first k+1 percent for each k below 100,
// from the arrival rank (0 first) and units of each buyer who won.
func Fairness(n int, won map[int]int) (first1, first10 float64, curve []float64) {
	curve = make([]float64, 100)
	total := 0
	for _, u := range won {
		total += u
	}
	if total == 0 || n == 0 {
		return 0, 0, curve
	}
	byPct := make([]int, 100)
	for rank, u := range won {
		// rank is among the first k+1 percent when rank < (k+1)·n/100.
		byPct[min(99, max(0, rank*100/n))] += u
	}
	sum := 0
	for k := range curve {
		sum += byPct[k]
		curve[k] = float64(sum) / float64(total)
	}
	return curve[0], curve[9], curve
}

// writeFlash writes the flash runs' outcomes and answers by kind; the
// Markdown explains them and shows the chart.
func writeFlash(b *strings.Builder, rep Report, md bool) {
	runs := rep.Flash
	if len(runs) == 0 {
		return
	}
	r0 := runs[0]
	if md {
		fmt.Fprintf(b, "## Flash sale\n\n%d buyers arriving over %s (%s), each waiting %s for an answer, retries %d (budget %g of the buyers), qty %d, for %d units over %d sku(s), through %d replicas, %s. "+
			"*Sell-out*: from the first arrival to the last sale's answer. *Goodput*: sales answered within patience per second, over the time from the first arrival to the last of them. "+
			"*Answered*: the buyers who had a final answer within patience. *First 1%%/10%%*: the share of the ledger's units (answered in time or not) won by the first 1%%/10%% of the buyers by arrival. "+
			"Latencies run from a buyer's arrival to its final answer, retries included. *In the replicas*: the shed requests' time in the replicas' handlers (`stock_sales_shed_seconds`), the rest of their latency is the client's, the kernel's and the waits for a connection and a CPU. "+
			"*Send lag*: how late the harness sent buyers after their due arrival; far from 0, the machine could not both make the herd and serve it.\n\n![flash sale](%s)\n\n",
			r0.Buyers, r0.Over, r0.Shape, r0.Patience, r0.Retries, r0.RetryBudget, r0.Qty, r0.Units, r0.SKUs, len(rep.Replicas), ConnsText(r0.Conns), FlashChartFile)
	}
	sum := [][]string{{"strategy", "sold", "ledger", "sell-out", "goodput/s", "answered", "first 1%", "first 10%", "attempts", "admin p99", "readyz fail", "heartbeat miss", "send lag p99", "verdict"}}
	kinds := [][]string{{"strategy", "answer", "buyers", "p50", "p90", "p99", "max", "in the replicas p99"}}
	for _, r := range runs {
		sum = append(sum, []string{r.Strategy, fmt.Sprintf("%d of %d", r.Sold, r.Units), fmt.Sprint(r.LedgerUnits),
			orDash(r.SellOutSeconds, func(s float64) string { return Ms(1000 * s) }), fmt.Sprintf("%.1f", r.Goodput),
			fmt.Sprintf("%.1f%%", 100*r.AnsweredShare), pct(r.First1), pct(r.First10), fmt.Sprintf("%d (%d retries)", r.Attempts, r.Retried),
			Ms(r.Control.AdminP99), fmt.Sprintf("%d of %d", r.Control.ReadyzFailures, r.Control.Readyz), logged(r.Control, r.Control.HeartbeatMisses),
			Ms(r.DispatchLagP99), string(verdict.OutcomeOf(r.Safe, r.Checks))})
		for _, k := range r.Kinds {
			if k.Buyers > 0 {
				inReplicas := "-"
				if k.Kind == KindShed {
					inReplicas = orDash(r.ReplicaShedP99, Ms)
				}
				kinds = append(kinds, []string{r.Strategy, k.Kind, fmt.Sprint(k.Buyers), Ms(k.Latency.P50), Ms(k.Latency.P90), Ms(k.Latency.P99), Ms(k.Latency.Max), inReplicas})
			}
		}
	}
	table(b, md, sum, func(col int) bool { return col == 0 || col == 13 })
	b.WriteString("\n")
	table(b, md, kinds, func(col int) bool { return col < 2 })
	if !md {
		return
	}
	var shed []string
	for _, r := range runs {
		var parts []string
		for _, reason := range slices.Sorted(maps.Keys(r.ShedReasons)) {
			parts = append(parts, fmt.Sprintf("%s %d", reason, r.ShedReasons[reason]))
		}
		if len(parts) > 0 {
			shed = append(shed, r.Strategy+": "+strings.Join(parts, ", "))
		}
	}
	if len(shed) > 0 {
		fmt.Fprintf(b, "\nShed by the replicas, by reason (`stock_sales_shed_total`): %s.\n", strings.Join(shed, "; "))
	}
	b.WriteString("\n### The control plane during the herd\n\n")
	ctl := [][]string{{"strategy", "item GETs", "failed", "GET p99", "GET max", "readyz", "failed", "heartbeat misses", "recovery passes failed", "taken for dead", "lock renewal failures", "leases lost", "recovered orders"}}
	for _, r := range runs {
		c := r.Control
		ctl = append(ctl, []string{r.Strategy, fmt.Sprint(c.AdminGets), fmt.Sprint(c.AdminFailures), Ms(c.AdminP99), Ms(c.AdminMax), fmt.Sprint(c.Readyz), fmt.Sprint(c.ReadyzFailures),
			logged(c, c.HeartbeatMisses), logged(c, c.RecoveryFailures), logged(c, c.DeadFound), fmt.Sprint(c.RenewalFailures), fmt.Sprint(c.LeasesLost), fmt.Sprint(c.RecoveredOrders)})
	}
	table(b, md, ctl, func(col int) bool { return col == 0 })
	b.WriteString("\nA GET of the item and a `/readyz` of each replica every 100 ms from the first arrival until the last buyer's patience ran out. Heartbeat misses, failed recovery passes and replicas taken for dead are counted in the logs of the replicas the harness started (\"-\" for replicas of your own): the replicas export no such series. The last three columns are from their `/metrics` (`stock_lock_renewal_failures_total`, `stock_leases_lost_total`, `stock_recovered_orders_total`), summed over the replicas over the run.\n")
}

// logged is n, or "-" when the replicas' logs were not read.
func logged(c FlashControl, n int) string {
	if !c.Logged {
		return "-"
	}
	return fmt.Sprint(n)
}

// ConnsText words Flash.Conns: the connections the buyers share to each replica.
func ConnsText(n int) string {
	if n == 0 {
		return "a connection per buyer in flight"
	}
	return fmt.Sprintf("at most %d connections to each", n)
}

func pct(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) }

// The flash chart's layout: a row per run, answers by kind over time on
// the left, units won by arrival on the right.
const (
	flashRowH  = 170
	flashTop   = 84
	flashTimeX = 150
	flashTimeW = 520
	flashFairX = 740
	flashFairW = 200
	flashPlotH = 120
)

var flashColors = map[string]string{KindSale: "#2e7d32", KindSoldOut: "#90a4ae", KindShed: "#f9a825", KindUnavailable: "#e65100", KindTimedOut: "#c62828", KindError: "#6a1b9a"}

// drawFlash draws each run's final answers by kind over time, stacked,
// and the share of the units won by the first k% of arrivals.
func drawFlash(b *strings.Builder, rep Report) {
	runs := rep.Flash
	if len(runs) == 0 {
		return
	}
	r0 := runs[0]
	svgHead(b, chartWidth, flashTop+len(runs)*flashRowH+30, 12, "stocklock: a flash sale, answers by kind over time",
		esc(fmt.Sprintf("%d buyers over %s (%s), patience %s, %d units, %d replicas", r0.Buyers, r0.Over, r0.Shape, r0.Patience, r0.Units, len(rep.Replicas))))
	x := flashTimeX
	for _, k := range FlashKinds {
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", x, flashTop-14, flashColors[k], x+14, flashTop-5, esc(k))
		x += 24 + 7*len(k)
	}
	fmt.Fprintf(b, `<text x="%d" y="%d">units won by the first k%% of arrivals</text>`+"\n", flashFairX, flashTop-5)
	for i, r := range runs {
		y0 := flashTop + i*flashRowH + 10
		base := y0 + flashPlotH
		fmt.Fprintf(b, `<text x="16" y="%d" font-weight="bold">%s</text><text x="16" y="%d" fill="#555">sold %d of %d</text><text x="16" y="%d" fill="#555">goodput %.0f/s</text>`+"\n",
			y0+20, esc(r.Strategy), y0+38, r.Sold, r.Units, y0+56, r.Goodput)
		peak := 1
		for _, bin := range r.Timeline {
			s := 0
			for _, n := range bin {
				s += n
			}
			peak = max(peak, s)
		}
		w := float64(flashTimeW) / float64(max(1, len(r.Timeline)))
		for j, bin := range r.Timeline {
			y := float64(base)
			for k, n := range bin {
				h := float64(flashPlotH) * float64(n) / float64(peak)
				if n > 0 {
					y -= h
					fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", float64(flashTimeX)+float64(j)*w, y, math.Max(w-0.5, 0.5), h, flashColors[FlashKinds[k]])
				}
			}
		}
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`+"\n", flashTimeX, base, flashTimeX+flashTimeW, base)
		fmt.Fprintf(b, `<text x="%d" y="%d" font-size="10" fill="#777">0s</text><text x="%d" y="%d" font-size="10" fill="#777" text-anchor="end">%.1fs</text><text x="%d" y="%d" font-size="10" fill="#777" text-anchor="end">%d/bin</text>`+"\n",
			flashTimeX, base+12, flashTimeX+flashTimeW, base+12, r.BinSeconds*float64(len(r.Timeline)), flashTimeX-4, y0+8, peak)
		// Fairness: the curve and its frame; the diagonal is every arrival alike.
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#ccc"/><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#ccc" stroke-dasharray="3,3"/>`+"\n",
			flashFairX, y0, flashFairW, flashPlotH, flashFairX, base, flashFairX+flashFairW, y0)
		pts := []string{fmt.Sprintf("%d,%d", flashFairX, base)}
		for k, share := range r.Won {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", float64(flashFairX)+float64(flashFairW)*float64(k+1)/100, float64(base)-float64(flashPlotH)*share))
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="#1565c0" stroke-width="2"/>`+"\n", strings.Join(pts, " "))
		fmt.Fprintf(b, `<text x="%d" y="%d" font-size="10" fill="#777">first 1%%: %s, 10%%: %s</text>`+"\n", flashFairX+4, y0+12, pct(r.First1), pct(r.First10))
		fmt.Fprintf(b, `<text x="%d" y="%d" font-size="10" fill="#777">0%%</text><text x="%d" y="%d" font-size="10" fill="#777" text-anchor="end">100%% of arrivals</text>`+"\n",
			flashFairX, base+12, flashFairX+flashFairW, base+12)
	}
	b.WriteString("</svg>\n")
}
