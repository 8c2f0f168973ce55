package report

import (
	"strings"
	"testing"

	"github.com/stocklock/stocklock/loadtest/verdict"
)

// series makes n samples of one process of replica a, every 5 s, whose
// resources follow f.
func series(n int, started float64, f func(i int) SoakSample) []SoakSample {
	var out []SoakSample
	for i := range n {
		s := f(i)
		s.Replica, s.Started, s.At = "a", started, float64(5*i)
		out = append(out, s)
	}
	return out
}

func TestJudgeSoak(t *testing.T) {
	judged := func(s []SoakSample) []string { return verdict.Failures(JudgeSoak(s)) }
	flat := func(i int) SoakSample {
		return SoakSample{RSS: 80 + float64(i%3), Goroutines: 120, FDs: 40, Sockets: 30}
	}
	if p := judged(series(40, 1, flat)); len(p) != 0 {
		t.Errorf("flat resources: %v, want no problem", p)
	}
	// Growth in warm-up that levels off passes.
	levels := func(i int) SoakSample {
		return SoakSample{RSS: 40 + 60*float64(min(i, 8))/8, Goroutines: 120, FDs: 40, Sockets: 30}
	}
	if p := judged(series(40, 1, levels)); len(p) != 0 {
		t.Errorf("growth that levels off: %v, want no problem", p)
	}
	// A goroutine leak: 20 more every sample, to the end.
	leak := func(i int) SoakSample {
		return SoakSample{RSS: 80, Goroutines: 120 + 20*float64(i), FDs: 40, Sockets: 30}
	}
	p := judged(series(40, 1, leak))
	if len(p) != 1 || !strings.Contains(p[0], "goroutines") {
		t.Errorf("a goroutine leak: %v, want it named", p)
	}
	// A restart is a new process: its samples are judged apart, and a
	// short one not at all.
	restarted := append(series(20, 1, flat), series(5, 2, func(int) SoakSample { return SoakSample{RSS: 500, Goroutines: 900, FDs: 300, Sockets: 200} })...)
	if p := judged(restarted); len(p) != 0 {
		t.Errorf("a restart: %v, want no problem", p)
	}
	// Too few samples to judge is not a pass.
	if p := judged(series(6, 1, flat)); len(p) != 1 || !strings.Contains(p[0], "nothing could be judged") {
		t.Errorf("6 samples: %v, want a problem", p)
	}
	var b strings.Builder
	if SoakSection.Draw(&b, Report{Soak: &Soak{Duration: "3m20s", Segment: "1m", Samples: series(40, 1, leak)}}); !strings.Contains(b.String(), "<polyline") {
		t.Errorf("chart: %d bytes", b.Len())
	}
}
