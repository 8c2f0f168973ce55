package report

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

func TestBound(t *testing.T) {
	held := []string{"read", "write", "release"}
	steps := map[string]float64{"lock": 40, "read": 1, "write": 2, "release": 1, "ledger": 3, "unpend": 1}
	b := Bound(steps, held)
	if b == nil || math.Abs(*b-250) > 1e-9 {
		t.Fatalf("Bound = %v, want 1000 ms over the held steps' 4 ms", b)
	}
	if Bound(map[string]float64{"read": 1, "write": 2}, held) != nil {
		t.Fatal("Bound without the release's time is not nil")
	}
	if Bound(map[string]float64{"read": 0, "write": 0, "release": 0}, held) != nil {
		t.Fatal("Bound of zero times is not nil")
	}
}

func TestCapacityBound(t *testing.T) {
	bound := func(v float64) *float64 { return &v }
	runs := []Run{
		{Strategy: "redis-lock", ReplicaCount: 2, CapacityStep: 1, TargetRate: 50, SalesPerSec: 49, Verdict: "PASS", BoundPerSec: bound(400), StepMs: map[string]float64{"read": 1, "write": 1}},
		{Strategy: "redis-lock", ReplicaCount: 2, CapacityStep: 2, TargetRate: 100, SalesPerSec: 98, Verdict: "PASS", BoundPerSec: bound(200)},
		{Strategy: "redis-lock", ReplicaCount: 2, CapacityStep: 3, TargetRate: 200, SalesPerSec: 120, Verdict: "PASS", Saturated: "fell behind", BoundPerSec: bound(150)},
		{Strategy: "atomic", ReplicaCount: 2, CapacityStep: 1, TargetRate: 50, SalesPerSec: 50, Verdict: "PASS"},
	}
	rows := CapacityRows(runs)
	if len(rows) != 2 || rows[0].Peak.BoundPerSec == nil || *rows[0].Peak.BoundPerSec != 150 || rows[0].Peak.TargetRate != 200 || rows[0].Best.TargetRate != 100 || rows[1].Peak.BoundPerSec != nil {
		t.Fatalf("rows = %+v: want redis-lock's bound at its peak, past the limits, and none for atomic", rows)
	}
	rep := Report{Runs: runs, Sections: []Section{CapacitySection}}
	var table strings.Builder
	CapacitySection.Write(&table, rep, false)
	lines := strings.Split(table.String(), "\n")
	if !strings.Contains(lines[0], "bound") || !strings.Contains(lines[0], "% of bound") ||
		!strings.Contains(lines[1], "98.0 at 100 req/s") || !strings.Contains(lines[1], "150.0") || !strings.Contains(lines[1], "80%") {
		t.Fatalf("capacity table:\n%s", table.String())
	}
	var svg strings.Builder
	CapacitySection.Draw(&svg, rep)
	if n := strings.Count(svg.String(), `stroke-dasharray`); n != 1 {
		t.Fatalf("capacity chart has %d dashed lines, want one, redis-lock's bound", n)
	}
	if !strings.Contains(svg.String(), "bound 150.0 sales/s") {
		t.Fatal("capacity chart does not name redis-lock's bound")
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "| redis-lock | 2 | 50 | 49.0 | 400.0 | 12% |") || !strings.Contains(md.String(), "read 1.00 ms, write 1.00 ms") {
		t.Fatalf("markdown lacks the steps' bounds:\n%s", md.String())
	}
}
