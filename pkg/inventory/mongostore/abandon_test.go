package mongostore

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"

	"github.com/stocklock/stocklock/pkg/strategy"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// held wraps a strategy so that its Decrement stops before it starts,
// and so before its stock write, until release is closed: a replica paused
// (a GC pause, a frozen VM, SIGSTOP) in the middle of a keyed request.
type held struct {
	inventory.Strategy
	reached, release chan struct{}
}

func hold(st inventory.Strategy) *held {
	return &held{Strategy: st, reached: make(chan struct{}), release: make(chan struct{})}
}

func (h *held) Decrement(ctx context.Context, req inventory.Request) (inventory.Sale, error) {
	close(h.reached)
	<-h.release
	return h.Strategy.Decrement(ctx, req)
}

// keyedStrategies builds, on store s, one strategy of each kind of stock
// write: atomic's conditional $inc, a fenced lock write, optimistic's
// compare-and-set and unsafe's plain write. Every lock strategy shares the
// one locker, as replicas share one lock service.
func keyedStrategies(t *testing.T, s *Store, locks lockServices) []inventory.Strategy {
	t.Helper()
	locked, err := NewLocked(s, LockedConfig{Name: strategy.RedisLock, Locker: locks[strategy.RedisLock], Fencing: true})
	if err != nil {
		t.Fatal(err)
	}
	return []inventory.Strategy{NewAtomic(s), locked, NewOptimistic(s, 0, 0), NewUnsafe(s, 0)}
}

// TestAbandonedKeyCannotSellTwice: replica A reserves key K and pauses
// before its stock write; replica B's recovery gives K's attempt up; A
// wakes and writes; a retry of K on B sells. Whatever the clocks, exactly
// one of the two may sell. The attempt is given up in two ways that make
// B decide by its clock that A's request is over, although it is not: A's
// stamp six minutes behind (a slow clock, an NTP step, a pause that long),
// and B configured to abandon after a millisecond while A is not.
func TestAbandonedKeyCannotSellTwice(t *testing.T) {
	locks := newLockServices(t)
	cases := []struct {
		name         string
		abandonAfter time.Duration // B's
		skew         time.Duration // how far behind A's stamp is
	}{
		{"skewed-stamp", 0, 6 * time.Minute},
		{"other-timeout", time.Millisecond, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := testStore(t)
			b := replicaStore(t, a, StoreOptions{Replica: "b", AbandonAfter: c.abandonAfter})
			onA, onB := keyedStrategies(t, a, locks), keyedStrategies(t, b, locks)
			for i := range onA {
				t.Run(onA[i].Name(), func(t *testing.T) {
					ctx := t.Context()
					sku := "pause-" + onA[i].Name()
					mustPut(t, a, sku, 10)
					req := inventory.Request{SKU: sku, Qty: 1, Key: "K"}
					h := hold(onA[i])
					type result struct {
						sale     inventory.Sale
						replayed bool
						err      error
					}
					first := make(chan result, 1)
					go func() {
						sale, replayed, err := a.DecrementOnce(context.Background(), h, req, "")
						first <- result{sale, replayed, err}
					}()
					<-h.reached
					if c.skew > 0 {
						back := bson.D{{Key: "$set", Value: bson.D{{Key: "at", Value: time.Now().Add(-c.skew).UTC()}}}}
						if _, err := a.attempts.UpdateMany(ctx, bson.D{}, back); err != nil {
							t.Fatal(err)
						}
						if _, err := a.keys.UpdateOne(ctx, bson.D{{Key: "_id", Value: sku + "/K"}}, back); err != nil {
							t.Fatal(err)
						}
					}
					// AbandonAfter is counted by the store's clock,
					// estimated conservatively (a few round trips late):
					// B's recovery gives the attempt up once it sees it
					// that old.
					recoverUntilAbandoned(t, b)
					close(h.release)
					r1 := <-first
					retry, replayed, err := b.DecrementOnce(ctx, onB[i], req, "")
					if err != nil {
						t.Fatalf("retry of K on B: %v", err)
					}
					if r1.err == nil && !(replayed && retry.OrderID == r1.sale.OrderID) {
						t.Errorf("A's paused request sold %s and B's retry sold %s (replayed %v): the key sold twice",
							r1.sale.OrderID, retry.OrderID, replayed)
					}
					if r1.err != nil && !errors.Is(r1.err, inventory.ErrAbandoned) {
						t.Errorf("A's paused request: %v, want inventory.ErrAbandoned", r1.err)
					}
					if it := mustGet(t, a, sku); it.Stock != 9 {
						t.Errorf("stock = %d, want 9: key K sold once", it.Stock)
					}
					if n := mustCount(t, a, sku); n != 1 {
						t.Errorf("orders = %d, want 1", n)
					}
					again, replayed, err := a.DecrementOnce(ctx, onA[i], req, "")
					if err != nil || !replayed || again.OrderID != retry.OrderID {
						t.Errorf("third try of K: %+v, replayed %v, %v; want the one sale replayed", again, replayed, err)
					}
				})
			}
		})
	}
}

// dies stands for a replica killed (kill -9) after it reserved a key and
// before its stock write: its Decrement ends the calling goroutine.
type dies struct{ inventory.Strategy }

func (dies) Decrement(context.Context, inventory.Request) (inventory.Sale, error) {
	runtime.Goexit()
	return inventory.Sale{}, nil
}

// TestDeadReplicaKeySettles: a replica dies between reserving key K and its
// stock write. A retry of K on the surviving replica must sell once the
// survivor has seen the dead replica's heartbeat stand still for
// DeadAfter, without waiting for AbandonAfter (an hour here); and the dead
// replica's attempt must not be able to sell afterwards.
func TestDeadReplicaKeySettles(t *testing.T) {
	base := testStore(t)
	survivor := replicaStore(t, base, StoreOptions{Replica: "survivor", AbandonAfter: time.Hour, DeadAfter: 50 * time.Millisecond})
	dying := replicaStore(t, base, StoreOptions{Replica: "dying", AbandonAfter: time.Hour})
	ctx := t.Context()
	mustPut(t, base, "dead", 10)
	for _, s := range []*Store{dying, survivor} {
		if _, err := s.Heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	req := inventory.Request{SKU: "dead", Qty: 1, Key: "K"}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _, _ = dying.DecrementOnce(context.Background(), dies{NewAtomic(dying)}, req, "")
	}()
	<-done
	var lost keyRecord
	if err := base.keys.FindOne(ctx, bson.D{{Key: "_id", Value: "dead/K"}}).Decode(&lost); err != nil {
		t.Fatalf("the dead replica's reservation: %v", err)
	}

	// The survivor retries as a client would, beating as its server does.
	var sale inventory.Sale
	for try := 1; ; try++ {
		if _, err := survivor.Heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
		var replayed bool
		var err error
		sale, replayed, err = survivor.DecrementOnce(ctx, NewAtomic(survivor), req, "")
		if err == nil {
			if replayed {
				t.Fatalf("retry replayed %+v: nothing was sold before", sale)
			}
			break
		}
		if !errors.Is(err, inventory.ErrInProgress) || try == 5 {
			t.Fatalf("retry %d of K on the survivor: %v; want a sale once the dead replica's heartbeat stood still", try, err)
		}
	}
	// The dead replica's attempt is fenced out, should it wake after all.
	late := dying.newOrder(inventory.Request{SKU: "dead", Qty: 1, OrderID: lost.OrderID, Key: "K"}, strategy.Unsafe, 0)
	if err := dying.setStock(ctx, 0, late); !errors.Is(err, inventory.ErrAbandoned) {
		t.Fatalf("the dead replica's late write: %v, want inventory.ErrAbandoned", err)
	}
	if it := mustGet(t, base, "dead"); it.Stock != 9 || mustCount(t, base, "dead") != 1 {
		t.Fatalf("stock %d, orders %d: want 9 and 1", it.Stock, mustCount(t, base, "dead"))
	}
	// Once the dead replica has no attempt left, its heartbeat goes.
	if _, err := survivor.RecoverKeys(ctx); err != nil {
		t.Fatal(err)
	}
	if hbs := findAll[heartbeat](t, base.beats); len(hbs) != 1 || hbs[0].Replica != "survivor" {
		t.Fatalf("heartbeats = %+v, want only the survivor's", hbs)
	}
}

// TestOwnAttemptSettlesAtOnce: an attempt of this store that is no longer
// in flight (its request returned with the outcome unknown, or could not
// end it) is settled by this store's next recovery, whatever its age.
func TestOwnAttemptSettlesAtOnce(t *testing.T) {
	base := testStore(t)
	s := replicaStore(t, base, StoreOptions{Replica: "self", AbandonAfter: time.Hour})
	ctx := t.Context()
	mustPut(t, s, "own", 3)
	rec, err := s.newKeyRecord(ctx, inventory.Request{SKU: "own", Qty: 1, Key: "K"}, "fp")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.attempts.InsertOne(ctx, attempt{OrderID: rec.OrderID, KeyID: rec.ID, At: rec.At, Instance: s.instance}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.keys.InsertOne(ctx, rec); err != nil {
		t.Fatal(err)
	}
	// Another store leaves it alone: it is young and s beats.
	other := replicaStore(t, base, StoreOptions{Replica: "other"})
	if _, err := s.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := other.RecoverKeys(ctx); err != nil || got.Abandoned != 0 {
		t.Fatalf("another store's recovery: %+v, %v; want the live store's attempt left alone", got, err)
	}
	s.inFlight.add(rec.OrderID)
	if got, err := s.RecoverKeys(ctx); err != nil || got.Abandoned != 0 {
		t.Fatalf("recovery while in flight: %+v, %v; want it left alone", got, err)
	}
	s.inFlight.remove(rec.OrderID)
	if got, err := s.RecoverKeys(ctx); err != nil || got.Abandoned != 1 {
		t.Fatalf("recovery once over: %+v, %v; want it given up", got, err)
	}
}

// TestRestartSettlesItsPredecessor: a replica killed with a keyed request
// in flight and started again settles that request at its first recovery,
// without waiting DeadAfter: the earlier instance of its own name is dead.
// Another replica's instance, just as stale, waits DeadAfter.
func TestRestartSettlesItsPredecessor(t *testing.T) {
	base := testStore(t)
	ctx := t.Context()
	mustPut(t, base, "restart", 5)
	before := replicaStore(t, base, StoreOptions{Replica: "a"})
	other := replicaStore(t, base, StoreOptions{Replica: "b"})
	for _, s := range []*Store{before, other} {
		if _, err := s.Heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _, _ = s.DecrementOnce(context.Background(), dies{NewAtomic(s)}, inventory.Request{SKU: "restart", Qty: 1, Key: "K-" + s.replica}, "")
		}()
		<-done
	}
	after := replicaStore(t, base, StoreOptions{Replica: "a", AbandonAfter: time.Hour})
	if _, err := after.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := after.RecoverKeys(ctx)
	if err != nil || got.Abandoned != 1 {
		t.Fatalf("first recovery after the restart: %+v, %v; want the predecessor's attempt given up, b's left", got, err)
	}
	if _, _, err := after.DecrementOnce(ctx, NewAtomic(after), inventory.Request{SKU: "restart", Qty: 1, Key: "K-a"}, ""); err != nil {
		t.Fatalf("retry of the predecessor's key: %v", err)
	}
}

// recoverUntilAbandoned runs s's RecoverKeys until a pass gives one
// attempt up. AbandonAfter is counted on s's lower estimate of the store's
// clock, a few round trips behind an attempt's stamp, so the give-up comes
// at a later pass, never sooner; a pass that gives up more than one, or
// 100 passes with none, fail the test.
func recoverUntilAbandoned(t *testing.T, s *Store) {
	t.Helper()
	for try := 1; ; try++ {
		rec, err := s.RecoverKeys(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if rec.Abandoned == 1 {
			return
		}
		if rec.Abandoned != 0 || try == 100 {
			t.Fatalf("recovery pass %d: %+v; want one attempt abandoned", try, rec)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
