package report

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/stocklock/stocklock/loadtest/verdict"
)

// SoakChartFile is the soak's picture of the replicas' resources.
const SoakChartFile = "soak.svg"

// Soak is what a soak (loadtest soak) sampled, beside its segments' runs.
type Soak struct {
	Duration    string          `json:"duration"`
	Segment     string          `json:"segment"`
	SampleEvery string          `json:"sample_every"`
	Strategies  []string        `json:"strategies"`
	Samples     []SoakSample    `json:"samples"`
	Checks      []verdict.Check `json:"checks,omitempty"` // see JudgeSoak
}

// SoakSample is one replica's resources at one moment of a soak.
type SoakSample struct {
	Replica    string  `json:"replica"`
	At         float64 `json:"at_s"`    // seconds into the soak
	Started    float64 `json:"started"` // the process's start time: a new one after a crash drill
	RSS        float64 `json:"rss_mib"`
	Goroutines float64 `json:"goroutines"`
	FDs        float64 `json:"open_fds"`
	Sockets    float64 `json:"sockets"` // open sockets: HTTP clients and store connections; -1 unknown
}

// soakLimits are the growth JudgeSoak tolerates for each resource: both the share and the slack must be exceeded.
var soakLimits = []struct {
	name  string
	get   func(SoakSample) float64
	share float64
	slack float64
}{
	{"RSS (MiB)", func(s SoakSample) float64 { return s.RSS }, 0.5, 64},
	{"goroutines", func(s SoakSample) float64 { return s.Goroutines }, 0.5, 200},
	{"open files", func(s SoakSample) float64 { return s.FDs }, 0.5, 100},
	{"sockets", func(s SoakSample) float64 { return s.Sockets }, 0.5, 100},
}

// JudgeSoak looks at each process's samples (a replica restarted by a
// crash drill is a new process) that span at least 8 samples, and checks
// that no resource grew without bound: a resource fails when the median
// of its last quarter exceeds the median of its second quarter (the first
// is warm-up) by more than half and by more than a fixed slack (64 MiB,
// 200 goroutines, 100 files or sockets). Growth that levels off passes;
// growth that continues through the soak does not. With no process
// sampled 8 times, the one check says nothing could be judged.
func JudgeSoak(samples []SoakSample) []verdict.Check {
	sorted := slices.Clone(samples)
	slices.SortStableFunc(sorted, func(a, b SoakSample) int {
		return cmp.Or(strings.Compare(a.Replica, b.Replica), cmp.Compare(a.Started, b.Started))
	})
	var checks []verdict.Check
	for _, ss := range groupBy(sorted, func(s SoakSample) (string, bool) { return fmt.Sprint(s.Replica, "\x00", s.Started), true }) {
		if len(ss) < 8 {
			continue
		}
		q := len(ss) / 4
		for _, l := range soakLimits {
			early, late := median(ss[q:2*q], l.get), median(ss[len(ss)-q:], l.get)
			if early < 0 || late < 0 {
				continue
			}
			checks = append(checks, verdict.Check{Name: l.name + " growth", Kind: verdict.Safety,
				Scope:    fmt.Sprintf("replica %s (process of %.0fs samples)", ss[0].Replica, ss[len(ss)-1].At-ss[0].At),
				Observed: fmt.Sprintf("%.0f to %.0f", early, late), Bound: fmt.Sprintf("at most +%.0f%% or +%g", 100*l.share, l.slack),
				Pass: !(late > early*(1+l.share) && late-early > l.slack)})
		}
	}
	if len(checks) == 0 {
		checks = append(checks, verdict.Check{Name: "soak samples", Kind: verdict.Safety, Scope: "soak",
			Observed: "no process sampled 8 times: nothing could be judged (soak longer)", Bound: "8 per process"})
	}
	return checks
}

func median(ss []SoakSample, get func(SoakSample) float64) float64 {
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = get(s)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

func most[T any](floor float64, items []T, f func(T) float64) float64 {
	for _, it := range items {
		floor = max(floor, f(it))
	}
	return floor
}

// writeSoak writes each replica's first and last samples and the highest
// of each resource, and the verdict on growth; the Markdown adds the chart.
func writeSoak(b *strings.Builder, rep Report, md bool) {
	soak := *rep.Soak
	if md {
		b.WriteString("\n## Soak: the replicas' resources\n\n```")
	}
	b.WriteString("\n")
	rows := [][]string{{"replica", "samples", "RSS MiB first/last/max", "goroutines first/last/max", "open files first/last/max", "sockets first/last/max", "restarts"}}
	for _, ss := range byReplica(soak.Samples) {
		cells := []string{ss[0].Replica, fmt.Sprint(len(ss))}
		for _, l := range soakLimits {
			cells = append(cells, fmt.Sprintf("%.0f / %.0f / %.0f", l.get(ss[0]), l.get(ss[len(ss)-1]), most(math.Inf(-1), ss, l.get)))
		}
		processes := groupBy(ss, func(s SoakSample) (string, bool) { return fmt.Sprint(s.Started), true })
		rows = append(rows, append(cells, fmt.Sprint(len(processes)-1)))
	}
	table(b, false, rows, func(int) bool { return false })
	b.WriteString(judged(soak.Checks, "no resource grew without bound (rule: docs/faults.md#soak)", "GREW WITHOUT BOUND: ") + "\n")
	if md {
		fmt.Fprintf(b, "```\n\n![soak](%s)\n", SoakChartFile)
	}
}

// byReplica groups the samples by replica, in the replicas' name order.
func byReplica(samples []SoakSample) [][]SoakSample {
	sorted := slices.Clone(samples)
	slices.SortStableFunc(sorted, func(a, b SoakSample) int { return strings.Compare(a.Replica, b.Replica) })
	return groupBy(sorted, func(s SoakSample) (string, bool) { return s.Replica, true })
}

func drawSoak(b *strings.Builder, rep Report) {
	soak := *rep.Soak
	const pw, ph, pad = 460, 200, 50
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`, 2*(pw+pad)+pad, 2*(ph+pad)+pad+20)
	fmt.Fprintf(b, `<text x="%d" y="16" font-size="13">Soak %s: replicas' resources (mixed load, a fault every %s)</text>`, pad, esc(soak.Duration), esc(soak.Segment))
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd"}
	end := most(1, soak.Samples, func(s SoakSample) float64 { return s.At })
	for pi, l := range soakLimits {
		x0, y0 := pad+(pi%2)*(pw+pad), 30+pad/2+(pi/2)*(ph+pad)
		top := niceCeil(most(1, soak.Samples, l.get))
		axes(b, x0, y0, pw, ph, end, top, "seconds", l.name)
		for ri, ss := range byReplica(soak.Samples) {
			var pts []string
			for _, s := range ss {
				if l.get(s) < 0 {
					continue
				}
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", float64(x0)+s.At/end*pw, float64(y0+ph)-l.get(s)/top*ph))
			}
			c := colors[ri%len(colors)]
			fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, c, strings.Join(pts, " "))
			fmt.Fprintf(b, `<text x="%d" y="%d" fill="%s">replica %s</text>`, x0+pw-70, y0+12+14*ri, c, esc(ss[0].Replica))
		}
	}
	b.WriteString("</svg>\n")
}
