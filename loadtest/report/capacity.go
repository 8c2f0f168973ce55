package report

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/stocklock/stocklock/pkg/strategy"
)

// CapacityChartFile is the capacity sweep's chart.
const CapacityChartFile = "capacity.svg"

// CapacityRow is one strategy at one replica count in a capacity sweep.
type CapacityRow struct {
	Strategy string
	Replicas int
	Steps    []Run // by offered rate
	// Best is the step with the most sales/s within the limits (nil when
	// even the first passed them), Peak the one with the most of all: the
	// rate reached when offered more than it could sell, to set beside
	// the bound measured at it (Peak.BoundPerSec, nil without a lock).
	Best, Peak *Run
	Stop       string // why the sweep ended: the last step past the limits, or the last rate tried
}

// CapacityRows groups a sweep's steps by strategy and replica count.
func CapacityRows(runs []Run) []CapacityRow {
	var rows []CapacityRow
	for _, steps := range groupBy(runs, func(r Run) (string, bool) {
		return fmt.Sprintf("%s/%d", r.Strategy, r.ReplicaCount), r.CapacityStep > 0
	}) {
		slices.SortStableFunc(steps, func(a, b Run) int { return cmp.Compare(a.TargetRate, b.TargetRate) })
		row := CapacityRow{Strategy: steps[0].Strategy, Replicas: steps[0].ReplicaCount, Steps: steps,
			Stop: fmt.Sprintf("stopped at %d req/s, the highest rate tried", steps[len(steps)-1].TargetRate)}
		for j := range steps {
			s := &steps[j]
			if row.Peak == nil || s.SalesPerSec > row.Peak.SalesPerSec {
				row.Peak = s
			}
			if s.Saturated != "" {
				row.Stop = fmt.Sprintf("%d req/s: %s", s.TargetRate, s.Saturated)
			} else if row.Best == nil || s.SalesPerSec > row.Best.SalesPerSec {
				row.Best = s
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// Bound returns the most sales per second of one hot item that the step
// times allow: one over the sum of the mean times, in ms, of the held
// steps (run under the item's lock, one holder after the other); nil when
// a held step has no time or the sum is not positive.
func Bound(stepMs map[string]float64, held []string) *float64 {
	sum := 0.0
	for _, s := range held {
		ms, ok := stepMs[s]
		if !ok {
			return nil
		}
		sum += ms
	}
	if sum <= 0 {
		return nil
	}
	b := 1000 / sum
	return &b
}

// BoundShare is the run's sales/s as a share of its bound, "-" without one.
func (r Run) BoundShare() string {
	if r.BoundPerSec == nil || *r.BoundPerSec <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*r.SalesPerSec / *r.BoundPerSec)
}

// BoundText is the run's bound in sales/s, "-" without one.
func (r Run) BoundText() string {
	return orDash(r.BoundPerSec, func(v float64) string { return fmt.Sprintf("%.1f", v) })
}

// StepsText lists the run's mean step times in strategy.SaleSteps order
// ("lock <mean> ms, read <mean> ms, ..."), "-" without any.
func (r Run) StepsText() string {
	var parts []string
	for _, s := range strategy.SaleSteps {
		if ms, ok := r.StepMs[s]; ok {
			parts = append(parts, fmt.Sprintf("%s %.2f ms", s, ms))
		}
	}
	return cmp.Or(strings.Join(parts, ", "), "-")
}

// writeCapacity writes one line per strategy and replica count (CapacityRow);
// the Markdown adds the limits, the chart and every step.
func writeCapacity(b *strings.Builder, rep Report, md bool) {
	if md {
		fmt.Fprintf(b, "Limits of a step: %s.\n\n![capacity](%s)\n\n```\n", rep.Settings.CapacityLimit, CapacityChartFile)
	}
	header := []string{"strategy", "replicas", "capacity sales/s", "peak sales/s", "bound", "% of bound", "p99", "errors", "verdict", "sweep stopped"}
	table(b, false, rowsOf(header, CapacityRows(rep.Runs), func(r CapacityRow) []string {
		p := r.Peak
		cells := []string{r.Strategy, fmt.Sprint(r.Replicas), "-", fmt.Sprintf("%.1f", p.SalesPerSec), p.BoundText(), p.BoundShare(),
			"-", "-", "-", r.Stop}
		if best := r.Best; best != nil {
			cells[2], cells[6] = fmt.Sprintf("%.1f at %d req/s", best.SalesPerSec, best.TargetRate), Ms(best.Latency.P99)
			cells[7], cells[8] = fmt.Sprint(best.Errors()), best.Verdict
		}
		return cells
	}), func(col int) bool { return col == 0 || col >= 8 })
	if !md {
		return
	}
	b.WriteString("```\n\nEvery step (bound: one over the mean time of the steps run under the lock, read, write and release; step times are means over the step, ms):\n\n| strategy | replicas | offered req/s | sales/s | bound | % of bound | p99 | errors | verdict | past the limits | step times |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |\n")
	for _, r := range rep.Runs {
		fmt.Fprintf(b, "| %s | %d | %d | %.1f | %s | %s | %s | %d | %s | %s | %s |\n", r.Strategy, r.ReplicaCount, r.TargetRate, r.SalesPerSec, r.BoundText(), r.BoundShare(), Ms(r.Latency.P99), r.Errors(), r.Verdict, r.Saturated, r.StepsText())
	}
}

var capacityColors = []string{"#1565c0", "#2e7d32", "#e65100", "#6a1b9a", "#c62828", "#00838f", "#5d4037", "#9e9d24"}

// drawCapacity draws sales/s against the offered rate, a line per strategy
// and replica count, steps past the limits hollow; then, with several
// replica counts, capacity against replicas.
func drawCapacity(b *strings.Builder, rep Report) {
	rows := CapacityRows(rep.Runs)
	const (
		width, plotH = 980, 300
		left, plotW  = 70, 560
		legendX      = 670
	)
	var strategies []string
	var ns []int // the replica counts
	for _, r := range rows {
		ns = append(ns, r.Replicas)
		if !slices.Contains(strategies, r.Strategy) {
			strategies = append(strategies, r.Strategy)
		}
	}
	slices.Sort(ns)
	ns = slices.Compact(ns)
	color := func(strategy string) string {
		return capacityColors[slices.Index(strategies, strategy)%len(capacityColors)]
	}
	height := 96 + plotH + 60
	if len(ns) > 1 { // a second plot: capacity against replicas
		height += plotH + 90
	}
	first := 0
	if len(ns) > 0 {
		first = ns[0]
	}
	s := rep.Settings
	svgHead(b, width, height, 13, fmt.Sprintf("stocklock capacity: sales/s against the offered rate, %d replicas", first),
		fmt.Sprintf("%d sku (skew %g), %s per step, read-modify-write delay %s; hollow: past the limits; dashed: a lock strategy's bound", s.SKUs, s.Skew, s.Duration, cmp.Or(s.RMWDelay, "0s")),
		"limits: "+esc(s.CapacityLimit))
	shown := slices.DeleteFunc(slices.Clone(rows), func(r CapacityRow) bool { return r.Replicas != first })
	maxRate, maxSales := 1.0, 1.0
	for _, r := range shown {
		maxRate = most(maxRate, r.Steps, func(st Run) float64 { return float64(st.TargetRate) })
		maxSales = most(maxSales, r.Steps, func(st Run) float64 { return st.SalesPerSec })
		if bound := r.Peak.BoundPerSec; bound != nil {
			maxSales = max(maxSales, *bound)
		}
	}
	maxRate, maxSales = niceCeil(maxRate), niceCeil(maxSales)
	y0 := 86
	axes(b, left, y0, plotW, plotH, maxRate, maxSales, "offered req/s", "sales/s")
	for i, r := range shown {
		c := color(r.Strategy)
		var pts []string
		for _, st := range r.Steps {
			x := float64(left) + float64(st.TargetRate)/maxRate*plotW
			y := float64(y0+plotH) - st.SalesPerSec/maxSales*plotH
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
			fill := map[bool]string{true: c, false: "#ffffff"}[st.Saturated == ""]
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s" stroke="%s" stroke-width="2"><title>%s, %d replicas: %d req/s offered, %.1f sales/s, p99 %s %s</title></circle>`+"\n",
				x, y, fill, c, esc(r.Strategy), r.Replicas, st.TargetRate, st.SalesPerSec, Ms(st.Latency.P99), esc(st.Saturated))
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), c)
		if bound := r.Peak.BoundPerSec; bound != nil {
			y := float64(y0+plotH) - *bound/maxSales*plotH
			fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-width="1.5" stroke-dasharray="6 4"><title>%s, %d replicas: bound %.1f sales/s (one over the lock-held steps' mean time)</title></line>`+"\n",
				left, y, left+plotW, y, c, esc(r.Strategy), r.Replicas, *bound)
		}
		ly := y0 + 10 + i*20
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="14" height="4" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", legendX, ly-4, c, legendX+20, ly, esc(r.Strategy))
	}
	if len(ns) > 1 {
		y1 := y0 + plotH + 90
		fmt.Fprintf(b, `<text x="16" y="%d" font-size="15" font-weight="bold">peak sales/s (line) and capacity within the limits (dots) against the replicas: %s</text>`+"\n", y1-30, strings.ReplaceAll(strings.Trim(fmt.Sprint(ns), "[]"), " ", ", "))
		maxCap := niceCeil(most(1, rows, func(r CapacityRow) float64 { return r.Peak.SalesPerSec }))
		maxN := float64(ns[len(ns)-1])
		axes(b, left, y1, plotW, plotH, maxN, maxCap, "replicas", "sales/s")
		for i, name := range strategies {
			c := color(name)
			var pts []string
			for _, r := range rows {
				if r.Strategy != name {
					continue
				}
				x := float64(left) + float64(r.Replicas)/maxN*plotW
				y := float64(y1+plotH) - r.Peak.SalesPerSec/maxCap*plotH
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
				if r.Best != nil {
					cy := float64(y1+plotH) - r.Best.SalesPerSec/maxCap*plotH
					fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s"><title>%s, %d replicas: capacity %.1f sales/s</title></circle>`+"\n", x, cy, c, esc(name), r.Replicas, r.Best.SalesPerSec)
				}
			}
			fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"><title>%s: peak sales/s</title></polyline>`+"\n", strings.Join(pts, " "), c, esc(name))
			ly := y1 + 10 + i*20
			fmt.Fprintf(b, `<rect x="%d" y="%d" width="14" height="4" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", legendX, ly-4, c, legendX+20, ly, esc(name))
		}
	}
	b.WriteString("</svg>\n")
}

// axes draws a plot's frame, four ticks on each axis and their labels.
func axes(b *strings.Builder, x, y, w, h int, maxX, maxY float64, xLabel, yLabel string) {
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#bbb"/>`+"\n", x, y, w, h)
	for i := 0; i <= 4; i++ {
		tx := x + i*w/4
		ty := y + h - i*h/4
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle" fill="#555">%s</text>`+"\n", tx, y+h+16, compact(maxX*float64(i)/4))
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end" fill="#555">%s</text>`+"\n", x-6, ty+4, compact(maxY*float64(i)/4))
		if i > 0 && i < 4 {
			fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#eee"/>`+"\n", x, ty, x+w, ty)
		}
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", x+w/2, y+h+34, esc(xLabel))
	fmt.Fprintf(b, `<text x="%d" y="%d" transform="rotate(-90 %d %d)" text-anchor="middle">%s</text>`+"\n", x-50, y+h/2, x-50, y+h/2, esc(yLabel))
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func compact(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%gk", math.Round(v/100)/10)
	}
	return fmt.Sprintf("%g", math.Round(v*10)/10)
}
