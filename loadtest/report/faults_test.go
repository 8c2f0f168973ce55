package report

import (
	"strings"
	"testing"

	"github.com/stocklock/stocklock/loadtest/verdict"
)

func secs(v float64) *float64 { return &v }

func TestFaultRows(t *testing.T) {
	runs := []Run{
		{Fault: "crash", Strategy: "redis-lock", Safe: true, Verdict: "pass", Totals: verdict.Totals{Sold: 40}, RecoverySeconds: secs(1.2), Injected: true,
			Codes: map[string]int{"503 lock_unavailable": 3, "no answer: connection refused": 20}, Tokens: &verdict.TokenCheck{OK: true, Before: 5, After: 9}},
		{Fault: "crash", Strategy: "redis-lock", Safe: true, Verdict: "pass", Totals: verdict.Totals{Sold: 41}, RecoverySeconds: secs(1.0), Injected: true,
			Codes: map[string]int{"no answer: connection reset": 2}, Tokens: &verdict.TokenCheck{OK: true, Before: 4, After: 8}},
		{Fault: "crash", Strategy: "redis-lock", Safe: true, Verdict: "pass", Totals: verdict.Totals{Sold: 42}, RecoverySeconds: secs(1.9), Injected: true},
		{Fault: "crash", Strategy: "redis-lock", Safe: true, Verdict: "pass", Injected: true}, // sales never resumed
		{Fault: "pause, fencing off", Strategy: "redis-lock", Demo: true, Verdict: "demonstrated", Totals: verdict.Totals{LostUpdates: 1},
			Checks: verdict.Of(false, verdict.Zero("lost_updates", 1))},
		{Fault: "pause, fencing off", Strategy: "redis-lock", Demo: true, Verdict: "not reproduced in this run"},
		{Fault: "pause", Strategy: "mongo-lease", Safe: true, Verdict: "FAIL", Totals: verdict.Totals{Oversold: 2}, Checks: verdict.Of(true, verdict.Zero("oversold", 2)), Codes: map[string]int{"503 fenced": 1, "503 lease_lost": 1, "500 outcome_unknown": 4},
			Tokens: &verdict.TokenCheck{OK: false, Before: 3, After: 3, MaxBefore: 10, MinAfter: 9}},
		{Strategy: "atomic", Verdict: "pass"}, // not a drill
	}
	rows := FaultRows(runs)
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3: %+v", len(rows), rows)
	}
	crash := rows[0]
	if crash.Runs != 4 || crash.Injected != 4 || crash.Sold != 123 || crash.LockWait != 3 || crash.NoAnswer != 22 || crash.Recovered != 3 ||
		crash.RecoveryMed != 1.2 || crash.RecoveryMax != 1.9 || crash.TokenRuns != 2 || !crash.TokensOK || crash.Verdict != "pass" {
		t.Errorf("crash row: %+v", crash)
	}
	if demo := rows[1]; !demo.Demo || demo.LostUpdates != 1 || demo.Verdict != "demonstrated" {
		t.Errorf("demo row: %+v", demo)
	}
	pause := rows[2]
	if pause.Verdict != "FAIL" || pause.Fenced != 1 || pause.LeaseLost != 1 || pause.Other != 4 || pause.TokensOK {
		t.Errorf("failed pause row: %+v", pause)
	}

	var table, md, svg strings.Builder
	FaultSection.Write(&table, Report{Runs: runs}, false)
	FaultSection.Write(&md, Report{Runs: runs}, true)
	FaultSection.Draw(&svg, Report{Runs: runs, Settings: Settings{FaultTTL: "1s"}})
	for name, want := range map[string][]string{
		table.String(): {"redis-lock (demo)", "3/4", "1.20s", "1.90s", "ok 2/4", "BROKEN"},
		md.String():    {"| crash | redis-lock | 4 | pass |", "**FAIL**", "### Every run", "503 fenced × 1"},
		svg.String():   {"<svg", "crash · redis-lock", "(1 did not resume)", "oversold 2", "tokens", "</svg>"},
	} {
		for _, w := range want {
			if !strings.Contains(name, w) {
				t.Errorf("output lacks %q:\n%s", w, name)
			}
		}
	}
}

func TestFaultMarkdownLinksViolations(t *testing.T) {
	runs := []Run{
		{Fault: "pause, fencing off", Strategy: "redis-lock", Demo: true, Repeat: 1, Verdict: "demonstrated", Linearizable: "yes"},
		{Fault: "pause, fencing off", Strategy: "redis-lock", Demo: true, Repeat: 2, Verdict: "demonstrated", Linearizable: "no",
			History: "history-redis-lock-f2.jsonl", Violations: []string{"history-redis-lock-f2.html"}},
	}
	rows := FaultRows(runs)
	if len(rows) != 1 || rows[0].Linearizable != "no" {
		t.Fatalf("rows %+v: the worst history check must win", rows)
	}
	var b strings.Builder
	FaultSection.Write(&b, Report{Runs: runs}, true)
	if !strings.Contains(b.String(), "[picture](history-redis-lock-f2.html)") {
		t.Errorf("markdown does not link the violation:\n%s", b.String())
	}
}
