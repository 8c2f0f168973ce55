package mongostore

import (
	"testing"
	"time"
)

// TestLivenessJudgesReadings: a replica is dead only when its beat stood
// still between two of this store's readings DeadAfter apart. A store
// whose own readings stalled takes nobody for dead meanwhile, and a beat
// that moved during the stall keeps its replica alive.
func TestLivenessJudgesReadings(t *testing.T) {
	const deadAfter = 5 * time.Second
	self := heartbeat{Instance: "me", Replica: "a"}
	t0 := time.Unix(1000, 0)
	var l liveness
	l.observe(t0, []heartbeat{self, {Instance: "b1", Replica: "b", Beat: 7}}, deadAfter, self)
	if l.dead("b1", deadAfter) {
		t.Fatal("dead at the first reading")
	}
	// This store stalls for 10 s (a long recovery pass): no reading, so
	// nothing it has seen stood still for 5 s.
	if l.dead("b1", deadAfter) || len(l.deadBeats(deadAfter, "me")) != 0 {
		t.Fatal("dead while this store read nothing")
	}
	// It reads again: b beat meanwhile, and is alive.
	l.observe(t0.Add(10*time.Second), []heartbeat{self, {Instance: "b1", Replica: "b", Beat: 17}}, deadAfter, self)
	if l.dead("b1", deadAfter) {
		t.Fatal("dead although its beat moved")
	}
	// b's beat stands still across readings 5 s apart: dead, told once.
	if died := l.observe(t0.Add(12*time.Second), []heartbeat{self, {Instance: "b1", Replica: "b", Beat: 17}}, deadAfter, self); died != 0 {
		t.Fatalf("died %d after 2 s", died)
	}
	if died := l.observe(t0.Add(15*time.Second), []heartbeat{self, {Instance: "b1", Replica: "b", Beat: 17}}, deadAfter, self); died != 1 || !l.dead("b1", deadAfter) {
		t.Fatalf("died %d, dead %v after 5 s standing still; want 1, true", died, l.dead("b1", deadAfter))
	}
	if died := l.observe(t0.Add(16*time.Second), []heartbeat{self, {Instance: "b1", Replica: "b", Beat: 17}}, deadAfter, self); died != 0 {
		t.Fatalf("told again: %d", died)
	}
	// Its document gone (deleted as dead), it is forgotten.
	l.observe(t0.Add(17*time.Second), []heartbeat{self}, deadAfter, self)
	if l.dead("b1", deadAfter) {
		t.Fatal("a forgotten instance is dead")
	}
	if len(l.deadBeats(deadAfter, "me")) != 0 {
		t.Fatal("this store took itself for dead")
	}
}
