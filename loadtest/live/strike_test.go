package live

import (
	"errors"
	"testing"
	"time"

	"github.com/stocklock/stocklock/loadtest/harness"
)

// TestTargetStrikesTheStrategyThatSells follows a race of two strategies:
// a fault asked for before the first attack, or once a strategy has sold
// out, waits for the next strategy that sells; none is left after the
// last one sold out.
func TestTargetStrikesTheStrategyThatSells(t *testing.T) {
	tg := newTarget([]string{"unsafe", "redis-lock"})
	progress := func(strategy string, remaining int64, final bool) harness.Event {
		return harness.Event{Type: harness.EventProgress, Strategy: strategy, Progress: &harness.Progress{Remaining: remaining, Final: final}}
	}
	want := func(what string, got, want Strike) {
		t.Helper()
		if got != want {
			t.Errorf("%s: strike %+v, want %+v", what, got, want)
		}
	}

	want("before the race's first run", tg.strike(), Strike{Strategy: "unsafe"})
	tg.observe(harness.Event{Type: harness.EventRunStart, Strategy: "unsafe"})
	want("unsafe's stock being reset", tg.strike(), Strike{Strategy: "unsafe"})
	if !tg.observe(progress("unsafe", 300, false)) {
		t.Error("unsafe's attack started selling: no change seen")
	}
	want("unsafe selling", tg.strike(), Strike{Strategy: "unsafe", Now: true})
	if f := tg.due(); f != "" {
		t.Errorf("due %q with nothing waiting", f)
	}

	tg.observe(progress("unsafe", 0, false))
	want("unsafe sold out", tg.strike(), Strike{Strategy: "redis-lock", After: "unsafe"})
	if _, err := tg.ask("store-partition"); err != nil {
		t.Fatalf("ask while unsafe is sold out: %v", err)
	}
	if _, err := tg.ask("latency"); !errors.Is(err, errWaiting) {
		t.Errorf("a second fault asked while one waits: %v, want errWaiting", err)
	}
	tg.observe(progress("unsafe", -3, true))
	tg.observe(harness.Event{Type: harness.EventRunEnd, Strategy: "unsafe"})
	tg.observe(harness.Event{Type: harness.EventRunStart, Strategy: "redis-lock"})
	if f := tg.due(); f != "" {
		t.Errorf("due %q before redis-lock's attack sells", f)
	}
	want("redis-lock's stock being reset", tg.strike(), Strike{Strategy: "redis-lock", Pending: "store-partition"})
	tg.observe(progress("redis-lock", 280, false))
	if f := tg.due(); f != "store-partition" {
		t.Errorf("due %q once redis-lock sells, want store-partition", f)
	}
	if f := tg.due(); f != "" {
		t.Errorf("due %q twice", f)
	}

	tg.observe(progress("redis-lock", 0, false))
	want("the last strategy sold out", tg.strike(), Strike{After: "redis-lock"})
	if _, err := tg.ask("crash"); !errors.Is(err, errNothingLeft) {
		t.Errorf("ask after the last strategy sold out: %v, want errNothingLeft", err)
	}
}

// TestTargetFollowsACheckout follows a checkout of two strategies, which
// has no attack: a strategy sells from its first hold until the window
// after it, then a fault waits for the next strategy's first hold.
func TestTargetFollowsACheckout(t *testing.T) {
	tg := newTarget([]string{"atomic", "redis-lock"})
	tg.holds, tg.window = true, 4*time.Second
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	held := func(strategy string, after time.Duration) bool {
		return tg.observe(harness.Event{Type: harness.EventHeld, Strategy: strategy, At: t0.Add(after)})
	}
	if s := tg.strike(); s != (Strike{Strategy: "atomic"}) {
		t.Errorf("before the first hold: %+v", s)
	}
	if !held("atomic", 0) || tg.strike() != (Strike{Strategy: "atomic", Now: true}) {
		t.Errorf("atomic's first hold: %+v, want it struck now", tg.strike())
	}
	if held("atomic", 3*time.Second) {
		t.Error("a hold within the window changed the strike")
	}
	if !held("atomic", 4*time.Second) || tg.strike() != (Strike{Strategy: "redis-lock", After: "atomic"}) {
		t.Errorf("past atomic's window: %+v, want a fault to wait for redis-lock", tg.strike())
	}
	if _, err := tg.ask("crash"); err != nil {
		t.Fatal(err)
	}
	held("redis-lock", 20*time.Second)
	if f := tg.due(); f != "crash" {
		t.Errorf("due %q at redis-lock's first hold, want crash", f)
	}
}
