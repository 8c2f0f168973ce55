package mongostore

import (
	"context"
	"testing"
	"time"

	"github.com/stocklock/stocklock/internal/testskip"
	"github.com/stocklock/stocklock/pkg/inventory"
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
	l.observe(t0, t0, []heartbeat{self, {Instance: "b1", Replica: "b", Beat: 7}}, deadAfter, self)
	if l.dead("b1", deadAfter) {
		t.Fatal("dead at the first reading")
	}
	// This store stalls for 10 s (a long recovery pass): no reading, so
	// nothing it has seen stood still for 5 s.
	if l.dead("b1", deadAfter) || len(l.deadBeats(deadAfter, "me")) != 0 {
		t.Fatal("dead while this store read nothing")
	}
	// It reads again: b beat meanwhile, and is alive.
	l.observe(t0.Add(10*time.Second), t0.Add(10*time.Second), []heartbeat{self, {Instance: "b1", Replica: "b", Beat: 17}}, deadAfter, self)
	if l.dead("b1", deadAfter) {
		t.Fatal("dead although its beat moved")
	}
	// b's beat stands still across readings 5 s apart: dead, told once.
	if died := l.observe(t0.Add(12*time.Second), t0.Add(12*time.Second), []heartbeat{self, {Instance: "b1", Replica: "b", Beat: 17}}, deadAfter, self); died != 0 {
		t.Fatalf("died %d after 2 s", died)
	}
	if died := l.observe(t0.Add(15*time.Second), t0.Add(15*time.Second), []heartbeat{self, {Instance: "b1", Replica: "b", Beat: 17}}, deadAfter, self); died != 1 || !l.dead("b1", deadAfter) {
		t.Fatalf("died %d, dead %v after 5 s standing still; want 1, true", died, l.dead("b1", deadAfter))
	}
	if died := l.observe(t0.Add(16*time.Second), t0.Add(16*time.Second), []heartbeat{self, {Instance: "b1", Replica: "b", Beat: 17}}, deadAfter, self); died != 0 {
		t.Fatalf("told again: %d", died)
	}
	// Its document gone (deleted as dead), it is forgotten.
	l.observe(t0.Add(17*time.Second), t0.Add(17*time.Second), []heartbeat{self}, deadAfter, self)
	if l.dead("b1", deadAfter) {
		t.Fatal("a forgotten instance is dead")
	}
	if len(l.deadBeats(deadAfter, "me")) != 0 {
		t.Fatal("this store took itself for dead")
	}
}

// TestLateReadingKeepsLiveReplica: an observer pauses (GC, CPU
// starvation, SIGSTOP) after the server read the heartbeats and before it
// judges them. The other replica beats on meanwhile; the pause must not
// count as its beat standing still, nor give its keyed request up.
func TestLateReadingKeepsLiveReplica(t *testing.T) {
	// TestLivenessJudgesReadings keeps the judging of a late reading in
	// the quick tier, without the stall.
	testskip.Long(t, "stalls the observer three seconds, three DeadAfters, while a replica beats")
	const deadAfter = time.Second
	base := testStore(t)
	ctx := t.Context()
	observer := replicaStore(t, base, StoreOptions{Replica: "observer", DeadAfter: deadAfter, AbandonAfter: time.Hour})
	live := replicaStore(t, base, StoreOptions{Replica: "live", DeadAfter: deadAfter, AbandonAfter: time.Hour})
	mustPut(t, base, "late", 10)
	// live's keyed request is in flight, before its stock write.
	h := hold(NewAtomic(live))
	type result struct {
		sale inventory.Sale
		err  error
	}
	first := make(chan result, 1)
	go func() {
		sale, _, err := live.DecrementOnce(context.Background(), h, inventory.Request{SKU: "late", Qty: 1, Key: "K"}, "")
		first <- result{sale, err}
	}()
	<-h.reached
	if _, err := live.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := observer.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}

	// The observer reads the heartbeats, then stalls for three times
	// DeadAfter while live beats on.
	observer.afterBeatRead = func() {
		for range 6 {
			if _, err := live.Heartbeat(ctx); err != nil {
				t.Error(err)
			}
			time.Sleep(deadAfter / 2)
		}
	}
	died, err := observer.Heartbeat(ctx)
	observer.afterBeatRead = nil
	if err != nil {
		t.Fatal(err)
	}
	if died != 0 {
		t.Errorf("the observer took %d replicas for dead after a pause of its own", died)
	}
	rec, err := observer.RecoverKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	close(h.release)
	r := <-first
	if rec.Abandoned != 0 || r.err != nil {
		t.Errorf("observer's recovery %+v; live's request: %v; want it left alone and sold", rec, r.err)
	}
	if it := mustGet(t, base, "late"); it.Stock != 9 {
		t.Errorf("stock = %d, want 9", it.Stock)
	}
}

// TestLeftStoreIsDeadAtOnce: a store that left (a clean shutdown) is dead
// to the others at once, not after DeadAfter (an hour here), and a
// successor of its name starts without watching its heartbeat.
func TestLeftStoreIsDeadAtOnce(t *testing.T) {
	base := testStore(t)
	ctx := t.Context()
	opts := StoreOptions{Replica: "a", DeadAfter: time.Hour}
	before := replicaStore(t, base, opts)
	observer := replicaStore(t, base, StoreOptions{Replica: "observer", DeadAfter: time.Hour})
	for _, s := range []*Store{before, observer} {
		if _, err := s.Heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := before.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if died, err := observer.Heartbeat(ctx); err != nil || died != 1 {
		t.Fatalf("heartbeat after a store left: died %d, %v; want 1", died, err)
	}
	// Without the mark, CheckPeers would watch the heartbeat for two
	// fifths of an hour.
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := replicaStore(t, base, opts).CheckPeers(cctx); err != nil {
		t.Fatalf("successor of a store that left: %v", err)
	}
}

// TestCheckPeersIgnoresStaleHeartbeats: a predecessor that stopped
// beating without leaving (kill -9) does not stop its successor, nor does
// a stale heartbeat with another timeout; it costs a short watch.
func TestCheckPeersIgnoresStaleHeartbeats(t *testing.T) {
	base := testStore(t)
	ctx := t.Context()
	for _, o := range []StoreOptions{{Replica: "a", DeadAfter: time.Second}, {Replica: "b", DeadAfter: 2 * time.Second}} {
		if _, err := replicaStore(t, base, o).Heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := replicaStore(t, base, StoreOptions{Replica: "a", DeadAfter: time.Second}).CheckPeers(ctx); err != nil {
		t.Fatalf("successor of a killed store: %v", err)
	}
}
