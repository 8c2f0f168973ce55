package mongostore

import (
	"strings"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// skewed returns a clock whose wall part is d off the real one; its
// monotonic part (what elapsed times are measured with) is the real one,
// as on a machine whose date is wrong.
func skewed(d time.Duration) func() time.Time {
	return func() time.Time { return time.Now().Add(d) }
}

// TestKeyExpiryIgnoresReplicaClocks: a key is remembered for the
// retention by the store's clock, whatever the replicas' clocks say. A
// replica whose clock is behind by more than the retention sells with key
// K, or one whose clock is ahead by as much sweeps the keys; either way K
// must not be expired at once, and a retry of K replays the sale instead
// of selling again.
func TestKeyExpiryIgnoresReplicaClocks(t *testing.T) {
	const retention = time.Hour
	cases := []struct {
		name            string
		seller, sweeper time.Duration // each replica's clock error
	}{
		{"seller-behind", -2 * retention, 0},
		{"sweeper-ahead", 0, 2 * retention},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := testStore(t)
			ctx := t.Context()
			seller := replicaStore(t, base, StoreOptions{Replica: "seller", KeyRetention: retention})
			seller.now = skewed(c.seller)
			sweeper := replicaStore(t, base, StoreOptions{Replica: "sweeper", KeyRetention: retention})
			sweeper.now = skewed(c.sweeper)
			mustPut(t, base, "skew", 10)
			req := inventory.Request{SKU: "skew", Qty: 1, Key: "K"}
			first, _, err := seller.DecrementOnce(ctx, NewAtomic(seller), req, "")
			if err != nil {
				t.Fatal(err)
			}
			rec, err := sweeper.RecoverKeys(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Expired != 0 {
				t.Errorf("the sweeper expired %d keys just sold", rec.Expired)
			}
			retry, replayed, err := sweeper.DecrementOnce(ctx, NewAtomic(sweeper), req, "")
			if err != nil {
				t.Fatal(err)
			}
			if !replayed || retry.OrderID != first.OrderID {
				t.Errorf("retry of K: order %s, replayed %v; want order %s replayed", retry.OrderID, replayed, first.OrderID)
			}
			if it, n := mustGet(t, base, "skew"), mustCount(t, base, "skew"); it.Stock != 9 || n != 1 {
				t.Errorf("stock %d, orders %d; want 9 and 1: key K sold once", it.Stock, n)
			}
		})
	}
}

// TestStoreTimeBoundsServerClock: with this process's wall clock two
// hours off, the estimates of the store's clock still bound what the
// server stamps ($currentDate): the lower one taken before a write is no
// later than its stamp, the upper one taken after is no earlier.
func TestStoreTimeBoundsServerClock(t *testing.T) {
	s := testStore(t)
	s.now = skewed(-2 * time.Hour)
	ctx := t.Context()
	coll := s.keys.Database().Collection("clock_probe")
	for i := range 20 {
		lower, err := s.storeTime(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			At time.Time `bson:"at"`
		}
		err = coll.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: i}},
			bson.D{{Key: "$currentDate", Value: bson.D{{Key: "at", Value: true}}}},
			options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)).Decode(&doc)
		if err != nil {
			t.Fatal(err)
		}
		upper, err := s.storeTime(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		if lower.After(doc.At) || upper.Before(doc.At) || upper.Sub(lower) > time.Minute {
			t.Fatalf("store time estimates [%v, %v] around a write the server stamped %v", lower, upper, doc.At)
		}
	}
}

// TestStoreTimeKeepsTheLastReading: once the store's clock has been read,
// a read of it that fails (here: the store's client disconnected) leaves
// the last reading in use, two minutes old, and its estimates still bound
// what the server stamps. Without any reading the failure is the caller's
// error, with "inventory:" once in its chain.
func TestStoreTimeKeepsTheLastReading(t *testing.T) {
	s := testStore(t)
	ctx := t.Context()
	if _, err := s.storeTime(ctx, false); err != nil {
		t.Fatal(err)
	}
	// Make the reading two minutes old, as if taken then: due for a
	// refresh, and as sound as it was.
	s.clock.mu.Lock()
	s.clock.server = s.clock.server.Add(-2 * time.Minute)
	s.clock.sent = s.clock.sent.Add(-2 * time.Minute)
	s.clock.received = s.clock.received.Add(-2 * time.Minute)
	s.clock.mu.Unlock()
	if err := s.keys.Database().Client().Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	probe := testDB(t).Collection("clock_probe")
	for i := range 3 {
		lower, err := s.storeTime(ctx, false)
		if err != nil {
			t.Fatalf("lower estimate with a reading two minutes old and the store's clock unreadable: %v", err)
		}
		var doc struct {
			At time.Time `bson:"at"`
		}
		err = probe.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: i}},
			bson.D{{Key: "$currentDate", Value: bson.D{{Key: "at", Value: true}}}},
			options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)).Decode(&doc)
		if err != nil {
			t.Fatal(err)
		}
		upper, err := s.storeTime(ctx, true)
		if err != nil {
			t.Fatalf("upper estimate with a reading two minutes old and the store's clock unreadable: %v", err)
		}
		if lower.After(doc.At) || upper.Before(doc.At) || upper.Sub(lower) > time.Minute {
			t.Fatalf("store time estimates [%v, %v] around a write the server stamped %v", lower, upper, doc.At)
		}
	}
	s.clock.mu.Lock()
	failed := s.clock.failed
	s.clock.mu.Unlock()
	if failed.IsZero() {
		t.Fatal("no read of the store's clock failed: the old reading was not put to the test")
	}

	fresh := testStore(t)
	if err := fresh.keys.Database().Client().Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.storeTime(ctx, true); err == nil {
		t.Fatal("an estimate of the store's clock with no reading and an unreadable store: want an error")
	}
	req := inventory.Request{SKU: "clock", Qty: 1, Key: "K"}
	_, err := fresh.newKeyRecord(ctx, req, fingerprint(req, ""))
	if err == nil || strings.Count(err.Error(), "inventory:") != 1 {
		t.Fatalf("stamping a key with no reading of the store's clock: %v; want an error saying \"inventory:\" once", err)
	}
}

// TestNarrowerReading: a new reading of the store's clock replaces the
// last one only when its bounds are as tight as the last one's have grown
// since (2 ms of allowance for 2 s of age).
func TestNarrowerReading(t *testing.T) {
	for _, c := range []struct {
		rtt, last, age time.Duration
		want           bool
	}{
		{time.Millisecond, 2 * time.Millisecond, 0, true},
		{3 * time.Millisecond, 2 * time.Millisecond, 0, false},
		{3 * time.Millisecond, 2 * time.Millisecond, 2 * time.Second, true},
		{40 * time.Millisecond, 2 * time.Millisecond, 5 * time.Second, false},
	} {
		if got := narrower(c.rtt, c.last, c.age); got != c.want {
			t.Errorf("narrower(%v, %v, %v) = %v, want %v", c.rtt, c.last, c.age, got, c.want)
		}
	}
}
