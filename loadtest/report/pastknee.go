package report

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/stocklock/stocklock/loadtest/verdict"
)

// GoodputChartFile is the capacity sweep's goodput against offered load.
const GoodputChartFile = "goodput.svg"

// PastKneeSection is a capacity sweep's steps past the knee
// (loadtest capacity --past-knee): their table and the goodput chart.
var PastKneeSection = Section{writePastKnee, GoodputChartFile, drawGoodput}

// pastKnee are rep's steps past the knee.
func (rep Report) pastKnee() []FlashRun {
	return slices.DeleteFunc(slices.Clone(rep.Flash), func(r FlashRun) bool { return r.Offered == 0 })
}

// writePastKnee writes a row per step past the knee; the Markdown
// explains it and shows the chart.
func writePastKnee(b *strings.Builder, rep Report, md bool) {
	steps := rep.pastKnee()
	if len(steps) == 0 {
		return
	}
	if md {
		fmt.Fprintf(b, "\n## Past the knee\n\nEach strategy offered 2, 4 and 8 times its knee (its highest rate within the limits; at most 5000 req/s) with the open model of `loadtest flash`: "+
			"buyers at one rate for %s, each its own request with a deadline of %s (the p99 limit), on stock that never runs out. *Goodput*: sales answered within that deadline per second. "+
			"The chart sets it beside the sweep's sales/s (the closed model, at most --max-workers in flight) against the offered rate: a plateau holds, a collapse falls.\n\n![goodput against offered load](%s)\n\n",
			rep.Settings.Duration, steps[0].Patience, GoodputChartFile)
	} else {
		b.WriteString("\nPast the knee (open model):\n")
	}
	rows := [][]string{{"strategy", "replicas", "offered req/s", "goodput/s", "answered", "sales", "shed", "unavailable", "timed out", "sale p99", "admin p99", "verdict"}}
	for _, r := range steps {
		rows = append(rows, []string{r.Strategy, fmt.Sprint(r.Replicas), fmt.Sprint(r.Offered), fmt.Sprintf("%.1f", r.Goodput), pct(r.AnsweredShare),
			fmt.Sprint(r.Kind(KindSale).Buyers), fmt.Sprint(r.Kind(KindShed).Buyers), fmt.Sprint(r.Kind(KindUnavailable).Buyers), fmt.Sprint(r.Kind(KindTimedOut).Buyers),
			Ms(r.Kind(KindSale).Latency.P99), Ms(r.Control.AdminP99), string(verdict.OutcomeOf(r.Safe, r.Checks))})
	}
	table(b, md, rows, func(col int) bool { return col == 0 || col == 11 })
}

var goodputColors = []string{"#1565c0", "#2e7d32", "#e65100", "#6a1b9a", "#c62828", "#00838f", "#5d4037", "#ad1457", "#9e9d24", "#37474f", "#f9a825"}

// drawGoodput draws, per strategy and replica count, the sweep's sales/s
// (solid) and goodput past the knee (dashed) against the offered rate,
// on a log scale, beside the line where all that is offered sells.
func drawGoodput(b *strings.Builder, rep Report) {
	type point struct{ x, y float64 }
	lines := map[string][2][]point{}
	var names []string
	lo, hi, top := math.Inf(1), 0.0, 1.0
	add := func(name string, solid bool, x, y float64) {
		if _, ok := lines[name]; !ok {
			names = append(names, name)
		}
		l := lines[name]
		l[map[bool]int{true: 0, false: 1}[solid]] = append(l[map[bool]int{true: 0, false: 1}[solid]], point{x, y})
		lines[name] = l
		lo, hi, top = min(lo, x), max(hi, x), max(top, y)
	}
	for _, r := range rep.Runs {
		if r.CapacityStep > 0 {
			add(fmt.Sprintf("%s, %d replicas", r.Strategy, r.ReplicaCount), true, float64(r.TargetRate), r.SalesPerSec)
		}
	}
	for _, r := range rep.pastKnee() {
		add(fmt.Sprintf("%s, %d replicas", r.Strategy, r.Replicas), false, float64(r.Offered), r.Goodput)
	}
	const x0, y0, w, h = 70, 80, 640, 300
	svgHead(b, chartWidth, y0+h+60, 12, "stocklock: goodput against offered load", esc("solid: the sweep's sales/s (closed model); dashed: goodput past the knee (open model); grey: all that is offered sells"))
	if len(names) == 0 {
		b.WriteString("</svg>\n")
		return
	}
	hi = max(hi, lo*2)
	px := func(x float64) float64 { return x0 + w*math.Log2(x/lo)/math.Log2(hi/lo) }
	py := func(y float64) float64 { return y0 + h - h*y/top }
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#ccc"/>`+"\n", x0, y0, w, h)
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#bbb" stroke-dasharray="2,3"/>`+"\n", px(lo), py(lo), px(min(hi, top)), py(min(hi, top)))
	for x := lo; x <= hi*1.0001; x *= 2 {
		fmt.Fprintf(b, `<text x="%.1f" y="%d" font-size="10" fill="#777" text-anchor="middle">%.0f</text>`+"\n", px(x), y0+h+14, x)
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" fill="#555">offered req/s (log scale)</text><text x="%d" y="%d" font-size="10" fill="#777" text-anchor="end">%.0f/s</text><text x="%d" y="%d" font-size="10" fill="#777" text-anchor="end">0</text>`+"\n",
		x0+w/2-60, y0+h+32, x0-4, y0+8, top, x0-4, y0+h)
	for i, name := range names {
		color := goodputColors[i%len(goodputColors)]
		for k, pts := range lines[name] {
			var ps []string
			for _, p := range pts {
				ps = append(ps, fmt.Sprintf("%.1f,%.1f", px(p.x), py(p.y)))
				fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px(p.x), py(p.y), color)
			}
			fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(ps, " "), color, map[int]string{1: ` stroke-dasharray="6,4"`}[k])
		}
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", x0+w+30, y0+i*20, color, x0+w+48, y0+i*20+10, esc(name))
	}
	b.WriteString("</svg>\n")
}
