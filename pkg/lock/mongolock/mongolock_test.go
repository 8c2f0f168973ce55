package mongolock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/locktest"
	"github.com/stocklock/stocklock/pkg/lock/mongolock"
)

func TestConformance(t *testing.T) {
	db := dbName(t)
	h := locktest.Harness{
		// Every call is a client of its own on the same collection, as
		// separate processes would be.
		Backend: func(t *testing.T) lock.Backend { return mustNew(t, locks(t, mongoURI(), db)) },
		// A renewal through the embedded store is a write through the
		// gate to FerretDB: on this 2-core machine shared with other builds
		// it took up to ~370 ms under the race detector, and over 300 ms
		// without it while four test binaries ran at once (the quick
		// tier), which lost the watchdog test's lease. The suite's default
		// 300 ms lease must be renewed within 300 ms; a second leaves the
		// renewals (every third of it) room on a loaded machine.
		TTL: time.Second,
	}
	locktest.Run(t, h)
}

// lockState is the stored lock document.
type lockState struct {
	ID        string    `bson:"_id"`
	Owner     string    `bson:"owner"`
	Token     int64     `bson:"token"`
	ExpiresAt time.Time `bson:"expiresAt"`
}

func stateOf(t *testing.T, coll *mongo.Collection, key string) lockState {
	t.Helper()
	var d lockState
	if err := coll.FindOne(t.Context(), bson.D{{Key: "_id", Value: key}}).Decode(&d); err != nil {
		t.Fatalf("find lock document %q: %v", key, err)
	}
	return d
}

// TestHeldKeyIsNotAcquired checks what the server answers to the contended
// upsert (a duplicate-key error), and that the backend answers
// ErrNotAcquired and nothing else for a held key, with the lock document
// untouched. (TestDuplicateKeyIsNotAcquired, inside the package, drives the
// backend itself into the duplicate-key error.)
func TestHeldKeyIsNotAcquired(t *testing.T) {
	coll := locks(t, mongoURI(), dbName(t))
	b := mustNew(t, coll)
	ctx := ctxFor(t, time.Minute)
	const key = "sku-1"

	tok, err := b.TryAcquire(ctx, key, "holder", time.Minute)
	if err != nil {
		t.Fatalf("first TryAcquire: %v", err)
	}
	before := stateOf(t, coll, key)

	// The raw operation TryAcquire sends, to see the server's own answer.
	now := time.Now()
	raw := coll.FindOneAndUpdate(ctx,
		bson.D{{Key: "_id", Value: key}, {Key: "$or", Value: bson.A{
			bson.D{{Key: "owner", Value: ""}},
			bson.D{{Key: "expiresAt", Value: bson.D{{Key: "$lt", Value: now.Add(-mongolock.DefaultSkew)}}}},
			bson.D{{Key: "owner", Value: "contender"}},
		}}},
		bson.D{
			{Key: "$set", Value: bson.D{{Key: "owner", Value: "contender"}, {Key: "expiresAt", Value: now.Add(time.Minute)}}},
			{Key: "$inc", Value: bson.D{{Key: "token", Value: int64(1)}}},
		},
		options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)).Err()
	var se mongo.ServerError
	if !errors.As(raw, &se) || !mongo.IsDuplicateKeyError(raw) {
		t.Fatalf("server's answer to the contended upsert: %T %v, want a duplicate-key server error", raw, raw)
	}
	t.Logf("server's answer to the contended upsert: %T: %v", raw, raw)

	_, err = b.TryAcquire(ctx, key, "contender", time.Minute)
	if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire on a held key = %v, want ErrNotAcquired", err)
	}
	for _, other := range []error{lock.ErrNotHeld, lock.ErrInvalidArgument, lock.ErrLeaseLost} {
		if errors.Is(err, other) {
			t.Errorf("TryAcquire on a held key = %v, also matches %v", err, other)
		}
	}
	if mongo.IsDuplicateKeyError(err) || errors.As(err, &se) {
		t.Errorf("TryAcquire on a held key = %v, exposes the server error; callers must see only ErrNotAcquired", err)
	}
	if after := stateOf(t, coll, key); after != before {
		t.Errorf("lock document changed by failed attempts: %+v -> %+v", before, after)
	}
	if err := b.Release(ctx, key, "holder", tok); err != nil {
		t.Errorf("holder's Release: %v", err)
	}
}

// TestFirstAcquisitionRace has many owners race to create the same new key:
// the losers of the insert get a duplicate-key error, which must also be
// ErrNotAcquired, and exactly one wins.
func TestFirstAcquisitionRace(t *testing.T) {
	db := dbName(t)
	backends := []*mongolock.Backend{mustNew(t, locks(t, mongoURI(), db)), mustNew(t, locks(t, mongoURI(), db))}
	ctx := ctxFor(t, time.Minute)
	const racers, keys = 12, 5
	for k := range keys {
		key := fmt.Sprintf("new-key-%d", k)
		var (
			wg     sync.WaitGroup
			won    atomic.Int32
			errMu  sync.Mutex
			others []error
		)
		start := make(chan struct{})
		for r := range racers {
			wg.Go(func() {
				<-start
				_, err := backends[r%2].TryAcquire(ctx, key, fmt.Sprintf("racer-%d", r), time.Minute)
				switch {
				case err == nil:
					won.Add(1)
				case !errors.Is(err, lock.ErrNotAcquired):
					errMu.Lock()
					others = append(others, err)
					errMu.Unlock()
				}
			})
		}
		close(start)
		wg.Wait()
		if n := won.Load(); n != 1 {
			t.Errorf("%s: %d racers acquired a new key, want exactly 1", key, n)
		}
		for _, err := range others {
			t.Errorf("%s: a losing racer got %v, want ErrNotAcquired", key, err)
		}
	}
}

// TestReleaseKeepsDocument: the lock document outlives every release, so
// tokens continue from where they were.
func TestReleaseKeepsDocument(t *testing.T) {
	coll := locks(t, mongoURI(), dbName(t))
	b := mustNew(t, coll)
	ctx := ctxFor(t, time.Minute)
	const key = "sku-2"

	var last uint64
	for i := range 3 {
		tok, err := b.TryAcquire(ctx, key, fmt.Sprintf("owner-%d", i), time.Minute)
		if err != nil {
			t.Fatalf("TryAcquire %d: %v", i, err)
		}
		if tok != last+1 {
			t.Errorf("acquisition %d: token %d, want %d (tokens continue after release)", i, tok, last+1)
		}
		last = tok
		if err := b.Release(ctx, key, fmt.Sprintf("owner-%d", i), tok); err != nil {
			t.Fatalf("Release %d: %v", i, err)
		}
		d := stateOf(t, coll, key)
		if d.Owner != "" || d.Token != int64(tok) || !d.ExpiresAt.Before(time.Now()) {
			t.Errorf("after release %d: document %+v, want owner \"\", token %d, expiresAt in the past", i, d, tok)
		}
	}
	if n, err := coll.CountDocuments(ctx, bson.D{}); err != nil || n != 1 {
		t.Errorf("collection holds %d documents (err %v), want the 1 lock document", n, err)
	}
	// A second release of the same lease changes nothing.
	if err := b.Release(ctx, key, "owner-2", last); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("second Release = %v, want ErrNotHeld", err)
	}
}

// TestEnsureCollection: EnsureCollection creates the lock collection
// before any grant, answers nil when it exists, also to two processes
// that create it at once, and leaves it usable.
func TestEnsureCollection(t *testing.T) {
	db := dbName(t)
	coll := locks(t, mongoURI(), db)
	ctx := ctxFor(t, time.Minute)
	backends := []*mongolock.Backend{mustNew(t, coll), mustNew(t, locks(t, mongoURI(), db))}
	errs := make([]error, len(backends))
	var wg sync.WaitGroup
	for i, b := range backends {
		wg.Go(func() { errs[i] = b.EnsureCollection(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("EnsureCollection from two backends at once: %v", err)
	}
	names, err := coll.Database().ListCollectionNames(ctx, bson.D{})
	if err != nil || len(names) != 1 || names[0] != coll.Name() {
		t.Fatalf("collections after EnsureCollection: %v (err %v), want [%s]", names, err, coll.Name())
	}
	if err := backends[0].EnsureCollection(ctx); err != nil {
		t.Fatalf("EnsureCollection on an existing collection: %v", err)
	}
	if tok, err := backends[1].TryAcquire(ctx, "sku-1", "owner", time.Minute); err != nil || tok != 1 {
		t.Fatalf("first grant after EnsureCollection: token %d, %v; want token 1", tok, err)
	}
}

// TestEnsureCollectionSendsNoCreateWhenItExists: on a collection that
// exists, EnsureCollection only lists it, so a user without the
// createCollection privilege can start against a prepared database.
func TestEnsureCollectionSendsNoCreateWhenItExists(t *testing.T) {
	var creates atomic.Int64
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "create" {
			creates.Add(1)
		}
	}}
	c, err := mongo.Connect(options.Client().ApplyURI(mongoURI()).SetMonitor(mon))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	b := mustNew(t, c.Database(dbName(t)).Collection("locks"))
	ctx := ctxFor(t, time.Minute)
	for range 2 {
		if err := b.EnsureCollection(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := creates.Load(); n != 1 {
		t.Errorf("create commands for a collection made by the first call: %d, want 1", n)
	}
}

// TestTokensSurviveRestart restarts the server on the same data: a lease
// held before the restart is still held after it, and the next token
// continues from the last one.
func TestTokensSurviveRestart(t *testing.T) {
	s := devstoretest.Mongo(t) // its own: the test restarts it
	db := dbName(t)
	coll := locks(t, s.URI, db)
	b := mustNew(t, coll)
	ctx := ctxFor(t, 2*time.Minute)
	const key = "sku-3"

	var last uint64
	for range 3 {
		tok, err := b.TryAcquire(ctx, key, "before", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Release(ctx, key, "before", tok); err != nil {
			t.Fatal(err)
		}
		last = tok
	}
	held, err := b.TryAcquire(ctx, key, "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	if err := s.Restart(ctx); errors.Is(err, devstore.ErrCannotRestart) {
		t.Skipf("this MongoDB cannot be restarted by the test: %v", err)
	} else if err != nil {
		t.Fatalf("Restart: %v", err)
	}
	t.Logf("restart took %v", time.Since(start))

	// The client reconnects by itself, but drops its pooled connections
	// only when one fails: ping until it answers, so that the Release
	// below is not sent into a cut connection (its outcome would then be
	// unknown, and a retry could not tell).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := coll.Database().Client().Ping(ctx, nil)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer after the restart: %v", err)
		}
		t.Logf("ping after the restart: %v (retrying)", err)
	}

	other := mustNew(t, locks(t, s.URI, db))
	if _, err := other.TryAcquire(ctx, key, "contender", time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("contender's TryAcquire after restart = %v, want ErrNotAcquired (the lease was lost)", err)
	}
	if err := b.Release(ctx, key, "holder", held); err != nil {
		t.Fatalf("holder's Release after restart: %v", err)
	}
	next, err := other.TryAcquire(ctx, key, "after", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if next <= held || held <= last {
		t.Errorf("tokens: %d before, %d held across the restart, %d after; want strictly increasing", last, held, next)
	}
}

// TestSkewAllowance uses injected clocks: a contender takes over an
// unreleased lease only when it is expired by more than the skew allowance
// on the contender's clock.
func TestSkewAllowance(t *testing.T) {
	coll := locks(t, mongoURI(), dbName(t))
	ctx := ctxFor(t, time.Minute)
	const ttl = time.Minute

	for _, skew := range []time.Duration{mongolock.DefaultSkew, 0, 3 * time.Second} {
		t.Run(skew.String(), func(t *testing.T) {
			key := "skew-" + skew.String()
			t0 := time.Now().Truncate(time.Millisecond)
			expires := t0.Add(ttl)
			holder := mustNew(t, coll, mongolock.WithClock(fixed(t0)), mongolock.WithSkew(skew))
			tok, err := holder.TryAcquire(ctx, key, "holder", ttl)
			if err != nil {
				t.Fatal(err)
			}
			contender := func(at time.Time) *mongolock.Backend {
				return mustNew(t, coll, mongolock.WithClock(fixed(at)), mongolock.WithSkew(skew))
			}

			// Expired by the contender's clock, but not by more than the skew.
			for _, past := range []time.Duration{0, time.Millisecond, skew / 2, skew} {
				if past > skew {
					continue
				}
				if _, err := contender(expires.Add(past)).TryAcquire(ctx, key, "contender", ttl); !errors.Is(err, lock.ErrNotAcquired) {
					t.Fatalf("contender %v past the expiry (skew %v): TryAcquire = %v, want ErrNotAcquired", past, skew, err)
				}
			}
			if d := stateOf(t, coll, key); d.Owner != "holder" || d.Token != int64(tok) {
				t.Fatalf("refused attempts changed the lease: %+v", d)
			}

			// Past the skew: the contender takes over, with a higher token.
			taken, err := contender(expires.Add(skew+10*time.Millisecond)).TryAcquire(ctx, key, "contender", ttl)
			if err != nil {
				t.Fatalf("contender past the skew: TryAcquire = %v, want success", err)
			}
			if taken <= tok {
				t.Errorf("takeover token %d is not above %d", taken, tok)
			}
			// The old holder can neither refresh nor release the new lease,
			// whatever its clock says.
			if err := holder.Refresh(ctx, key, "holder", tok, ttl); !errors.Is(err, lock.ErrNotHeld) {
				t.Errorf("old holder's Refresh after the takeover = %v, want ErrNotHeld", err)
			}
			if err := holder.Release(ctx, key, "holder", tok); !errors.Is(err, lock.ErrNotHeld) {
				t.Errorf("old holder's Release after the takeover = %v, want ErrNotHeld", err)
			}
			if d := stateOf(t, coll, key); d.Owner != "contender" || d.Token != int64(taken) {
				t.Errorf("after the old holder's calls: %+v, want the contender's lease %d", d, taken)
			}
		})
	}
}

// TestRefresh: a refresh extends only the current lease, may revive one
// that expired untaken (nobody held the key in between: the token proves
// it), and never moves the expiry earlier.
func TestRefresh(t *testing.T) {
	coll := locks(t, mongoURI(), dbName(t))
	ctx := ctxFor(t, time.Minute)
	const key, ttl = "sku-4", time.Minute
	t0 := time.Now().Truncate(time.Millisecond)

	tok, err := mustNew(t, coll, mongolock.WithClock(fixed(t0))).TryAcquire(ctx, key, "holder", ttl)
	if err != nil {
		t.Fatal(err)
	}
	// Long expired, but nobody took it over: the refresh revives it.
	late := t0.Add(10 * ttl)
	if err := mustNew(t, coll, mongolock.WithClock(fixed(late))).Refresh(ctx, key, "holder", tok, ttl); err != nil {
		t.Fatalf("Refresh of an expired, untaken lease: %v", err)
	}
	if d := stateOf(t, coll, key); !d.ExpiresAt.Equal(late.Add(ttl)) || d.Token != int64(tok) {
		t.Errorf("after the refresh: %+v, want expiresAt %v and token %d", d, late.Add(ttl), tok)
	}
	// A clock stepped back does not shorten the lease.
	if err := mustNew(t, coll, mongolock.WithClock(fixed(t0))).Refresh(ctx, key, "holder", tok, ttl); err != nil {
		t.Fatalf("Refresh with an earlier clock: %v", err)
	}
	if d := stateOf(t, coll, key); !d.ExpiresAt.Equal(late.Add(ttl)) {
		t.Errorf("a refresh moved expiresAt back to %v, want %v", d.ExpiresAt, late.Add(ttl))
	}
	// A contender at the revived lease's old expiry cannot take it.
	if _, err := mustNew(t, coll, mongolock.WithClock(fixed(t0.Add(2*ttl)))).TryAcquire(ctx, key, "contender", ttl); !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("contender after the revival = %v, want ErrNotAcquired", err)
	}
}

// TestContendersDoNotStarveRenewal: through the embedded store's write gate
// every write waits its turn, so acquirers retrying on a held key could
// delay the holder's renewals past its TTL. 16 waiters in two processes
// (one of them the holder's), polling at lock.DefaultRetry's pace, must not.
//
// Starvation is waiting more turns than there are writers queued, not a
// time: a fair gate serves the holder's renewal after at most one write of
// each contender. The TTL is set from that count and from a write's round
// trip measured on the machine now (renewalBudget), so that the test
// asserts fairness on a quiet machine and on one at load 40 alike; a
// fixed second failed at load 40.
func TestContendersDoNotStarveRenewal(t *testing.T) {
	db := dbName(t)
	const contenders = 16
	ttl := renewalBudget(t, locks(t, mongoURI(), db), contenders)
	if raceEnabled {
		ttl *= 2 // see TestConformance
	}
	hold := max(3*ttl, 3*time.Second)
	t.Logf("TTL %v, held %v", ttl, hold)

	// The second process only contends: every grant attempt it writes
	// while the lease is held (findAndModify, the upsert of TryAcquire)
	// would queue at the gate in front of the renewals. A contender that
	// finds the key held must write none (it reads first), which needs no
	// clock to check. (An attempt cut off by the end of the hold frees
	// what it may hold with an update by its own owner: not counted.)
	var writing atomic.Bool
	var writes atomic.Int64
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "findAndModify" && writing.Load() {
			writes.Add(1)
		}
	}}
	contender, err := mongo.Connect(options.Client().ApplyURI(mongoURI()).SetMonitor(mon))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = contender.Disconnect(context.Background()) })

	var procs []*lock.Locker
	for _, coll := range []*mongo.Collection{locks(t, mongoURI(), db), contender.Database(db).Collection("locks")} {
		l, err := lock.New(mustNew(t, coll), lock.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		// Connect first: a client's first request waits for its
		// connection handshake, which is no part of what is measured.
		warm, err := l.Acquire(ctxFor(t, time.Minute), "warm-up")
		if err != nil {
			t.Fatal(err)
		}
		_ = warm.Release(ctxFor(t, time.Minute))
		procs = append(procs, l)
	}
	const key = "starve"
	lease, err := procs[0].Acquire(ctxFor(t, time.Minute), key)
	if err != nil {
		t.Fatal(err)
	}

	writing.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), hold)
	defer cancel()
	var wg sync.WaitGroup
	var taken atomic.Int64 // grants to contenders
	for i := range contenders {
		wg.Go(func() {
			for ctx.Err() == nil {
				if l, err := procs[i%2].Acquire(ctx, key); err == nil {
					taken.Add(1)
					_ = l.Release(context.Background())
				}
			}
		})
	}
	select {
	case <-lease.Done():
		t.Errorf("holder lost its %v lease to %d waiters: %v", ttl, contenders, lease.Err())
	case <-ctx.Done():
	}
	wg.Wait()
	writing.Store(false)
	if n := writes.Load(); n > 0 && taken.Load() == 0 {
		t.Errorf("the contending process sent %d grant attempts while the key was held: each waits at the gate in front of the holder's renewals", n)
	}
	if n := taken.Load(); n > 0 {
		t.Errorf("contenders acquired the key %d times while the holder renewed it", n)
	}
	if err := lease.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Errorf("Release after contention: %v", err)
	}
}

// renewalBudget is a TTL long enough for a fair gate: the holder renews a
// third of a TTL before expiry, and a renewal behind one write of each of
// n contenders (and its own) waits n+1 round trips. The round trip is the
// median of 11 uncontended refreshes now; 2/3 of the TTL covers four such
// queues, and the TTL is between 1 s and 10 s.
func renewalBudget(t *testing.T, coll *mongo.Collection, n int) time.Duration {
	t.Helper()
	l, err := lock.New(mustNew(t, coll), lock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	lease, err := l.Acquire(ctxFor(t, time.Minute), "round-trip")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lease.Release(ctxFor(t, time.Minute)) }()
	var trips []time.Duration
	for range 11 {
		start := time.Now()
		if err := lease.Refresh(ctxFor(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
		trips = append(trips, time.Since(start))
	}
	slices.Sort(trips)
	return min(max(time.Second, 4*time.Duration(n+1)*trips[len(trips)/2]*3/2), 10*time.Second)
}

// TestWriteConcernOnTheWire watches the commands the driver sends: every
// lock write carries majority with journal by default, and the caller's
// own collection is left as it was.
func TestWriteConcernOnTheWire(t *testing.T) {
	var (
		mu   sync.Mutex
		seen = map[string][]bson.Raw{}
	)
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		switch e.CommandName {
		case "findAndModify", "update", "insert":
			mu.Lock()
			wc, _ := e.Command.Lookup("writeConcern").DocumentOK()
			seen[e.CommandName] = append(seen[e.CommandName], wc)
			mu.Unlock()
		}
	}}
	c, err := mongo.Connect(options.Client().ApplyURI(mongoURI()).SetMonitor(mon))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	coll := c.Database(dbName(t)).Collection("locks")
	b := mustNew(t, coll)
	ctx := ctxFor(t, time.Minute)

	tok, err := b.TryAcquire(ctx, "k", "o", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Refresh(ctx, "k", "o", tok, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, "k", "o", tok); err != nil {
		t.Fatal(err)
	}
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "not-a-lock"}}); err != nil {
		t.Fatal(err)
	}
	// WithWriteConcern(nil) sends the collection's own (here: none).
	own := mustNew(t, coll, mongolock.WithWriteConcern(nil))
	if tok, err = own.TryAcquire(ctx, "k", "o", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := own.Release(ctx, "k", "o", tok); err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	defer mu.Unlock()
	want := func(cmd string, n int) {
		t.Helper()
		if len(seen[cmd]) != n+1 {
			t.Fatalf("saw %d %s commands, want %d", len(seen[cmd]), cmd, n+1)
		}
		for _, wc := range seen[cmd][:n] {
			if w, _ := wc.Lookup("w").StringValueOK(); w != "majority" {
				t.Errorf("%s write concern %v, want w: majority", cmd, wc)
			}
			if j, _ := wc.Lookup("j").BooleanOK(); !j {
				t.Errorf("%s write concern %v, want j: true", cmd, wc)
			}
		}
	}
	want("findAndModify", 1)
	want("update", 2)
	for _, cmd := range []string{"insert", "findAndModify", "update"} {
		if wc := seen[cmd][len(seen[cmd])-1]; wc != nil {
			t.Errorf("%s through the caller's collection or WithWriteConcern(nil) sent write concern %v, want none", cmd, wc)
		}
	}
}
