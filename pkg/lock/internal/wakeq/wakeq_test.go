package wakeq

import (
	"testing"
	"time"
)

func pending(ws ...*Watcher) []bool {
	var p []bool
	for _, w := range ws {
		p = append(p, len(w.C) > 0)
	}
	return p
}

func TestWakeOneInOrder(t *testing.T) {
	var q Queue
	a, b, c := q.Push(), q.Push(), q.Push()
	q.WakeOne(0)
	q.WakeOne(0)
	if got := pending(a, b, c); !got[0] || !got[1] || got[2] {
		t.Fatalf("after two wake-ups, pending = %v, want the two oldest", got)
	}
	if !q.Remove(a) {
		t.Error("Remove of a watcher with a wake-up pending reported none")
	}
	<-b.C
	if q.Remove(b) {
		t.Error("Remove of a watcher that took its wake-up reported one pending")
	}
	q.WakeOne(0)
	if !pending(c)[0] {
		t.Error("the last watcher left was not woken")
	}
	q.Remove(c)
	if !q.Empty() {
		t.Error("queue not empty after every watcher left")
	}
}

func TestWakeOneHolds(t *testing.T) {
	var q Queue
	a, b := q.Push(), q.Push()
	q.WakeOne(time.Hour)
	q.WakeOne(time.Hour) // a's wake-up is fresh: nobody else
	if got := pending(a, b); !got[0] || got[1] {
		t.Fatalf("pending = %v, want the oldest only while its wake-up is fresh", got)
	}
	q.WakeOne(time.Nanosecond) // a's is stale: b is woken
	if got := pending(a, b); !got[0] || !got[1] {
		t.Fatalf("pending = %v, want both once the first wake-up is stale", got)
	}
}

func TestWakeAll(t *testing.T) {
	var q Queue
	a, b := q.Push(), q.Push()
	q.WakeAll()
	q.WakeAll() // never blocks on a pending wake-up
	if got := pending(a, b); !got[0] || !got[1] {
		t.Fatalf("pending = %v, want all", got)
	}
}
