package report

import (
	"cmp"
	"fmt"
	"html"
	"math"
	"strings"

	"github.com/stocklock/stocklock/loadtest/verdict"
)

const (
	chartWidth = 980
	rowHeight  = 44
	top        = 116
	labelX     = 16
	salesX     = 190
	salesW     = 250
	latX       = 500
	latW       = 250
	anomX      = 800
)

func verdictColor(v string) string {
	colors := map[verdict.Outcome]string{verdict.Pass: "#2e7d32", verdict.Fail: "#c62828", verdict.Demonstrated: "#e65100"}
	return cmp.Or(colors[verdict.Outcome(v)], "#757575")
}

// drawCompare draws the chart comparing the runs of rep, a plain SVG drawn
// by hand (it needs no library and renders in any browser and on GitHub):
// one row per strategy, with a bar for its sales per second, a bar for its
// p99 latency (and a tick at p50), and the anomalies it showed.
func drawCompare(b *strings.Builder, rep Report) {
	n := len(rep.Runs)
	s := rep.Settings
	sub := fmt.Sprintf("%d req/s, %s, stock %d × %d sku, %d replicas", s.Rate, s.Duration, s.Stock, s.SKUs, len(rep.Replicas))
	if s.Requests > 0 {
		sub = fmt.Sprintf("%d req/s, %d requests, stock %d × %d sku, %d replicas", s.Rate, s.Requests, s.Stock, s.SKUs, len(rep.Replicas))
	}
	if s.RMWDelay != "" {
		sub += ", read-modify-write delay " + s.RMWDelay
	}
	store := "MongoDB and Redis: as the replicas were started"
	if rep.Store != "" {
		store = "MongoDB: " + rep.Store
	}
	svgHead(b, chartWidth, top+n*rowHeight+46, 13, esc("stocklock: selling the last unit once, strategy by strategy"),
		esc(sub), esc(clip(store, 140)), esc(rep.Started.Format("2006-01-02 15:04 MST")+", "+rep.Host))

	maxSales := cmp.Or(most(0, rep.Runs, func(r Run) float64 { return r.SalesPerSec }), 1)
	maxLat := most(10, rep.Runs, func(r Run) float64 { return r.Latency.P99 }) // the log scale spans at least 1ms..10ms

	hy := top - 10
	fmt.Fprintf(b, `<text x="%d" y="%d" font-weight="bold">sales/s (while the stock lasted)</text>`+"\n", salesX, hy)
	fmt.Fprintf(b, `<text x="%d" y="%d" font-weight="bold">latency p99, log scale (| p50)</text>`+"\n", latX, hy)
	for i := range rep.Runs {
		if i%2 == 0 {
			fmt.Fprintf(b, `<rect x="0" y="%d" width="%d" height="%d" fill="#f5f5f5"/>`+"\n", top+i*rowHeight, chartWidth, rowHeight)
		}
	}
	// Decade grid lines of the log scale.
	for d := 1.0; d <= maxLat*1.0001; d *= 10 {
		x, label := latX+logW(d, maxLat), fmt.Sprintf("%gms", d)
		if d >= 1000 {
			label = fmt.Sprintf("%gs", d/1000)
		}
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#ccc"/>`+"\n", x, top, x, top+n*rowHeight)
		fmt.Fprintf(b, `<text x="%d" y="%d" font-size="10" fill="#777" text-anchor="middle">%s</text>`+"\n", x, top+n*rowHeight+12, label)
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" font-weight="bold">anomalies</text>`+"\n", anomX, hy)

	for i, r := range rep.Runs {
		y := top + i*rowHeight
		cy := y + rowHeight/2
		fmt.Fprintf(b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", labelX, cy-3, esc(r.Strategy))
		fmt.Fprintf(b, `<text x="%d" y="%d" font-size="11" fill="%s">%s</text>`+"\n", labelX, cy+12, verdictColor(r.Verdict), esc(r.Verdict))
		barColor := map[bool]string{true: "#1565c0", false: "#9e9e9e"}[r.Safe]
		bw := int(float64(salesW) * r.SalesPerSec / maxSales)
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="18" fill="%s"/>`+"\n", salesX, cy-9, bw, barColor)
		fmt.Fprintf(b, `<text x="%d" y="%d">%.1f</text>`+"\n", salesX+bw+6, cy+5, r.SalesPerSec)
		lw := logW(r.Latency.P99, maxLat)
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="18" fill="#6a1b9a" fill-opacity="0.75"/>`+"\n", latX, cy-9, lw)
		p50 := latX + logW(r.Latency.P50, maxLat)
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000" stroke-width="2"/>`+"\n", p50, cy-12, p50, cy+12)
		fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`+"\n", latX+lw+6, cy+5, esc(Ms(r.Latency.P99)))
		marks := anomalyMarks(r.Oversold, r.LostUpdates, r.LedgerMismatch)
		if len(marks) == 0 {
			fmt.Fprintf(b, `<circle cx="%d" cy="%d" r="7" fill="#2e7d32"/>`+"\n", anomX+7, cy)
			fmt.Fprintf(b, `<text x="%d" y="%d" fill="#2e7d32">none</text>`+"\n", anomX+20, cy+5)
		} else {
			fmt.Fprintf(b, `<circle cx="%d" cy="%d" r="7" fill="#c62828"/>`+"\n", anomX+7, cy)
			fmt.Fprintf(b, `<path d="M%d %d l8 8 M%d %d l8 -8" stroke="#fff" stroke-width="2"/>`+"\n", anomX+3, cy-4, anomX+3, cy+4)
			fmt.Fprintf(b, `<text x="%d" y="%d" fill="#c62828">%s</text>`+"\n", anomX+20, cy+5, esc(strings.Join(marks, ", ")))
		}
	}
	ly := top + n*rowHeight + 30
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="12" height="12" fill="#1565c0"/><text x="%d" y="%d">safe strategy</text>`+"\n", labelX, ly-10, labelX+18, ly)
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="12" height="12" fill="#9e9e9e"/><text x="%d" y="%d">unsafe strategy (expected to oversell)</text>`+"\n", labelX+130, ly-10, labelX+148, ly)
	b.WriteString("</svg>\n")
}

// svgHead opens a chart of the given size on a white ground, with its
// title and the lines under it (escaped already).
func svgHead(b *strings.Builder, width, height, fontSize int, title string, lines ...string) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="%d">`+"\n",
		width, height, width, height, fontSize)
	b.WriteString(`<rect width="100%" height="100%" fill="#ffffff"/>` + "\n")
	fmt.Fprintf(b, `<text x="16" y="26" font-size="17" font-weight="bold">%s</text>`+"\n", title)
	for i, l := range lines {
		fmt.Fprintf(b, `<text x="16" y="%d" fill="#555">%s</text>`+"\n", 46+18*i, l)
	}
}

func esc(s string) string { return html.EscapeString(s) }

func anomalyMarks(oversold, lost, ledger int) []string {
	var marks []string
	for i, n := range []int{oversold, lost, ledger} {
		if n > 0 {
			marks = append(marks, fmt.Sprintf("%s %d", []string{"oversold", "lost", "ledger"}[i], n))
		}
	}
	return marks
}

// logW is the bar width of ms on a log scale from 1ms (0) to maxMs (latW).
func logW(ms, maxMs float64) int {
	if ms <= 1 {
		return 0
	}
	return int(float64(latW) * math.Log10(ms) / math.Log10(maxMs))
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
