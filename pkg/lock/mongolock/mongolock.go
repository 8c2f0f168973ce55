package mongolock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/stocklock/stocklock/pkg/lock"
)

// DefaultSkew is the clock-skew allowance used unless WithSkew says
// otherwise. NTP keeps hosts within a few milliseconds of each other, but
// a VM resumed from suspend or a container host that steps its clock can be
// hundreds of milliseconds off until the next sync. Half a second covers
// that and costs little: it only delays the takeover of a lease whose holder
// crashed (a released key is free at once), and is small beside
// lock.DefaultTTL.
const DefaultSkew = 500 * time.Millisecond

// MinTTL is the shortest lease this backend accepts (it implements
// lock.TTLFloor). A renewal is a journaled write that queues behind every
// other write; under load it takes tens to hundreds of milliseconds, and a
// lease must outlive two failed renewals.
const MinTTL = 250 * time.Millisecond

// Field names of the lock document.
const (
	fieldOwner     = "owner"
	fieldToken     = "token"
	fieldExpiresAt = "expiresAt"
)

// Backend is a lock.Backend on one MongoDB collection. It is safe for
// concurrent use. The zero value is not usable; call New.
type Backend struct {
	coll     *mongo.Collection
	skew     time.Duration
	now      func() time.Time
	attempts attempts

	// beforeGrant, if set, runs between the read and the grant: tests use
	// it to make another owner win the key in between.
	beforeGrant func()
}

var (
	_ lock.Backend       = (*Backend)(nil)
	_ lock.TTLFloor      = (*Backend)(nil)
	_ lock.OwnerReleaser = (*Backend)(nil)
)

// Option configures a Backend.
type Option func(*config)

type config struct {
	skew time.Duration
	wc   *writeconcern.WriteConcern
	now  func() time.Time
}

// WithSkew sets the clock-skew allowance: how far in the past, by this
// process's clock, a lease's expiresAt must be before this process takes
// the key over. It must cover the largest difference between the clocks of
// any two processes that share the collection. Default: DefaultSkew.
func WithSkew(d time.Duration) Option { return func(c *config) { c.skew = d } }

// WithWriteConcern sets the write concern of every lock write. nil keeps the
// collection's own. Default: majority with journal, so that an acknowledged
// grant survives a replica-set failover.
func WithWriteConcern(wc *writeconcern.WriteConcern) Option {
	return func(c *config) { c.wc = wc }
}

// WithClock replaces the clock that stamps and judges expiry, to inject a
// clock offset in tests and fault drills. Default: time.Now.
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// New returns a Backend that keeps its locks in coll, one document per key.
// Do not create a TTL index on coll, and do not delete its documents: see
// the package documentation. New does no I/O; see EnsureCollection.
func New(coll *mongo.Collection, opts ...Option) (*Backend, error) {
	if coll == nil {
		return nil, fmt.Errorf("mongolock: %w: nil collection", lock.ErrBadConfig)
	}
	wc := writeconcern.Majority()
	wc.Journal = new(true)
	c := config{skew: DefaultSkew, wc: wc, now: time.Now}
	for _, opt := range opts {
		opt(&c)
	}
	switch {
	case c.skew < 0:
		return nil, fmt.Errorf("mongolock: %w: negative skew %v", lock.ErrBadConfig, c.skew)
	case c.now == nil:
		return nil, fmt.Errorf("mongolock: %w: nil clock", lock.ErrBadConfig)
	case c.wc != nil && !c.wc.Acknowledged():
		// An unacknowledged grant cannot return a token, and an
		// unacknowledged release may never happen.
		return nil, fmt.Errorf("mongolock: %w: unacknowledged write concern", lock.ErrBadConfig)
	}
	// The pre-check read must see the latest grant, not a secondary's
	// past: a stale "held" would only cost a retry, but a long-stale one
	// makes a free key look held for as long as replication lags.
	co := options.Collection().SetReadPreference(readpref.Primary())
	if c.wc != nil {
		co.SetWriteConcern(c.wc)
	}
	coll = coll.Clone(co)
	return &Backend{coll: coll, skew: c.skew, now: c.now}, nil
}

// codeNamespaceExists is the server's answer to creating a collection
// that exists (MongoDB before 7.0, and FerretDB).
const codeNamespaceExists = 48

// EnsureCollection creates the lock collection unless it exists, in one
// create command: idempotent, and safe to run from several processes at
// once. It is not part of lock.Backend: call it once at start-up, with a
// context of its own, before the first TryAcquire. Without it the first
// grant's upsert creates the collection, within that attempt's context: on
// FerretDB v1 on PostgreSQL a collection is a table and a catalogue entry,
// and a context that ends between the two (a lock wait of 100 ms) leaves
// the table without its entry, after which every creation, and so every
// grant, fails ("relation already exists").
//
// A collection that exists is left alone (no createCollection privilege
// is needed then); a view of that name is an error.
func (b *Backend) EnsureCollection(ctx context.Context) error {
	db, name := b.coll.Database(), b.coll.Name()
	specs, err := db.ListCollectionSpecifications(ctx, bson.D{{Key: "name", Value: name}})
	if err != nil {
		return fmt.Errorf("mongolock: list collection %s: %w", name, err)
	}
	for _, sp := range specs {
		if sp.Type == "view" {
			return fmt.Errorf("mongolock: %s is a view, not a collection", name)
		}
		return nil
	}
	err = db.CreateCollection(ctx, name)
	var ce mongo.CommandError
	if err != nil && !(errors.As(err, &ce) && ce.Code == codeNamespaceExists) {
		return fmt.Errorf("mongolock: create collection %s: %w", name, err)
	}
	return nil
}

// NewLocker returns a lock.Locker over New(coll), with lockOpts as the
// Locker's defaults. For Backend options, use lock.New(New(coll, opts...)).
func NewLocker(coll *mongo.Collection, lockOpts ...lock.Option) (*lock.Locker, error) {
	b, err := New(coll)
	if err != nil {
		return nil, err
	}
	return lock.New(b, lockOpts...)
}

// MinTTL implements lock.TTLFloor: see the constant MinTTL.
func (b *Backend) MinTTL() time.Duration { return MinTTL }

// Skew returns the clock-skew allowance.
func (b *Backend) Skew() time.Duration { return b.skew }

// lockDoc is the lock document as TryAcquire reads it back.
type lockDoc struct {
	Owner     string    `bson:"owner"`
	Token     int64     `bson:"token"`
	ExpiresAt time.Time `bson:"expiresAt"`
}

// TryAcquire implements lock.Backend (see the package documentation): the
// grant is one findOneAndUpdate, preceded by a read that skips it when the
// key is visibly held. It returns an error wrapping lock.ErrNotAcquired when
// another owner holds an unexpired lease, and otherwise the new token,
// strictly greater than every token granted before for key. Calls on the
// same key through one Backend take turns, so a call may first wait, within
// ctx, for a sibling's attempt to finish.
func (b *Backend) TryAcquire(ctx context.Context, key, owner string, ttl time.Duration) (uint64, error) {
	if err := lock.CheckArgs(key, owner, ttl); err != nil {
		return 0, fmt.Errorf("mongolock: acquire %q: %w", key, err)
	}
	taken, done, err := b.attempts.wait(ctx, key, owner)
	if err != nil {
		return 0, fmt.Errorf("mongolock: acquire %q: waiting for this Backend's other attempts on the key: %w", key, err)
	}
	if taken {
		done(false)
		return 0, fmt.Errorf("mongolock: acquire %q: %w (granted to another owner through this Backend while this call waited)", key, lock.ErrNotAcquired)
	}
	token, err := b.tryAcquire(ctx, key, owner, ttl)
	done(err == nil)
	return token, err
}

// tryAcquire is TryAcquire's turn at the server.
func (b *Backend) tryAcquire(ctx context.Context, key, owner string, ttl time.Duration) (uint64, error) {
	now := b.now()
	cutoff := now.Add(-b.skew)

	// Test before test-and-set, as a spinlock does: an attempt that would
	// fail anyway costs only a read, and reads do not queue behind writes.
	// A failed upsert is a write: on the embedded store it holds the write
	// gate as long as a successful one, so waiters in many processes would
	// fill the write queue and starve the holder's renewals, until the
	// lease expired under its renewing holder. The read decides nothing: a
	// stale "held" only makes this attempt fail as if it had come a moment
	// earlier, and everything else goes on to the atomic grant below.
	var cur lockDoc
	switch err := b.coll.FindOne(ctx, bson.D{{Key: "_id", Value: key}}).Decode(&cur); {
	case errors.Is(err, mongo.ErrNoDocuments):
	case err != nil:
		return 0, fmt.Errorf("mongolock: acquire %q: find: %w", key, err)
	case cur.Owner != "" && cur.Owner != owner && !cur.ExpiresAt.Before(cutoff):
		return 0, fmt.Errorf("mongolock: acquire %q: %w", key, lock.ErrNotAcquired)
	}

	if b.beforeGrant != nil {
		b.beforeGrant()
	}

	// The grant. The filter is the same predicate as the read above, now
	// evaluated atomically with the update.
	filter := bson.D{
		{Key: "_id", Value: key},
		{Key: "$or", Value: bson.A{
			bson.D{{Key: fieldOwner, Value: ""}},
			bson.D{{Key: fieldExpiresAt, Value: bson.D{{Key: "$lt", Value: cutoff}}}},
			bson.D{{Key: fieldOwner, Value: owner}},
		}},
	}
	update := bson.D{
		{Key: "$set", Value: bson.D{
			{Key: fieldOwner, Value: owner},
			{Key: fieldExpiresAt, Value: expiry(now, ttl)},
		}},
		// int64, so the token is a NumberLong from the first grant on.
		{Key: "$inc", Value: bson.D{{Key: fieldToken, Value: int64(1)}}},
	}
	opts := options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)

	var doc lockDoc
	err := b.coll.FindOneAndUpdate(ctx, filter, update, opts).Decode(&doc)
	switch {
	case mongo.IsDuplicateKeyError(err):
		// The document exists and the filter did not match it: another
		// owner holds an unexpired lease. Not a failure.
		return 0, fmt.Errorf("mongolock: acquire %q: %w", key, lock.ErrNotAcquired)
	case err != nil:
		return 0, fmt.Errorf("mongolock: acquire %q: findOneAndUpdate: %w", key, err)
	case doc.Owner != owner || doc.Token <= 0:
		// Cannot happen on a server that honours the update; refuse to
		// hand out a token we cannot vouch for.
		return 0, fmt.Errorf("mongolock: acquire %q: server returned owner %q token %d after granting it to %q",
			key, doc.Owner, doc.Token, owner)
	}
	return uint64(doc.Token), nil
}

// Refresh implements lock.Backend: it sets the lease's expiry to ttl from
// now (never earlier than it was) if (key, owner, token) is still the
// current lease, and returns an error wrapping lock.ErrNotHeld otherwise.
func (b *Backend) Refresh(ctx context.Context, key, owner string, token uint64, ttl time.Duration) error {
	if err := lock.CheckArgs(key, owner, ttl); err != nil {
		return fmt.Errorf("mongolock: refresh %q: %w", key, err)
	}
	if token > math.MaxInt64 {
		return fmt.Errorf("mongolock: refresh %q token %d: %w", key, token, lock.ErrNotHeld)
	}
	// $max: the holder relies on the latest expiry it was granted, so a
	// refresh must never shorten it (a clock stepped back, a shorter ttl).
	update := bson.D{{Key: "$max", Value: bson.D{{Key: fieldExpiresAt, Value: expiry(b.now(), ttl)}}}}
	return b.update(ctx, "refresh", key, owner, token, update)
}

// Release implements lock.Backend: it marks the lease (key, owner, token)
// free, keeping the document and its token, and returns an error wrapping
// lock.ErrNotHeld if that lease is not the current one.
func (b *Backend) Release(ctx context.Context, key, owner string, token uint64) error {
	if err := lock.CheckArgs(key, owner, lock.NoTTL); err != nil {
		return fmt.Errorf("mongolock: release %q: %w", key, err)
	}
	if token > math.MaxInt64 {
		return fmt.Errorf("mongolock: release %q token %d: %w", key, token, lock.ErrNotHeld)
	}
	return b.update(ctx, "release", key, owner, token, releaseUpdate())
}

// ReleaseOwner implements lock.OwnerReleaser: it marks key free as Release
// does, keeping the document and its token, if owner holds it, whatever the
// token. When key is free or another owner's it changes nothing. An expired
// lease of owner's is marked free too: it no longer holds the key anyway.
func (b *Backend) ReleaseOwner(ctx context.Context, key, owner string) error {
	if err := lock.CheckArgs(key, owner, lock.NoTTL); err != nil {
		return fmt.Errorf("mongolock: release %q by owner: %w", key, err)
	}
	filter := bson.D{
		{Key: "_id", Value: key},
		{Key: fieldOwner, Value: owner},
	}
	if _, err := b.coll.UpdateOne(ctx, filter, releaseUpdate()); err != nil {
		return fmt.Errorf("mongolock: release %q by owner: %w", key, err)
	}
	return nil
}

// releaseUpdate marks a lock document free: no owner, and an expiry in the
// past.
func releaseUpdate() bson.D {
	return bson.D{{Key: "$set", Value: bson.D{
		{Key: fieldOwner, Value: ""},
		{Key: fieldExpiresAt, Value: time.Unix(0, 0).UTC()},
	}}}
}

// update applies update to the lease (key, owner, token) if it is the
// current one. The token in the filter is what makes this safe: any grant
// to anyone increments it.
func (b *Backend) update(ctx context.Context, op, key, owner string, token uint64, update bson.D) error {
	filter := bson.D{
		{Key: "_id", Value: key},
		{Key: fieldOwner, Value: owner},
		{Key: fieldToken, Value: int64(token)},
	}
	res, err := b.coll.UpdateOne(ctx, filter, update)
	if err != nil {
		return fmt.Errorf("mongolock: %s %q token %d: %w", op, key, token, err)
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("mongolock: %s %q token %d: %w", op, key, token, lock.ErrNotHeld)
	}
	return nil
}

// expiry returns now+ttl rounded up to the millisecond, the precision of a
// BSON date: rounding down could let the server's expiry fall before the
// holder's own idea of it.
func expiry(now time.Time, ttl time.Duration) time.Time {
	e := now.Add(ttl)
	if t := e.Truncate(time.Millisecond); !t.Equal(e) {
		return t.Add(time.Millisecond)
	}
	return e
}
