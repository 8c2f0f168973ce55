package mongostore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

// Collection names in the store's database.
const (
	ItemsCollection       = "items"
	OrdersCollection      = "orders"
	IdempotencyCollection = "idempotency"
	AttemptsCollection    = "idempotency_attempts"
	HeartbeatsCollection  = "heartbeats"
)

// DefaultWriteTimeout bounds a write that is sent even though its caller
// may have given up (see StoreOptions.WriteTimeout). It is long on purpose:
// a write that times out leaves the sale in doubt (ErrOutcomeUnknown), and
// on the embedded test store a write can queue for seconds behind others.
const DefaultWriteTimeout = 30 * time.Second

// StoreOptions configures a Store.
type StoreOptions struct {
	// Replica names this process in every order it records.
	Replica string

	// WriteConcern of every item and order write. nil means majority with
	// journal: an acknowledged sale must survive a replica-set failover.
	// (FerretDB accepts and ignores it.)
	WriteConcern *writeconcern.WriteConcern

	// WriteTimeout bounds a commit: the one write that takes the stock, and
	// the order insert after it. Commits are not cancelled with the request
	// that asked for them, because a write cancelled in flight may still be
	// applied, and the replica would then not know whether it sold: the
	// stock could be gone with no order and no answer. Default
	// DefaultWriteTimeout.
	WriteTimeout time.Duration

	// KeyRetention is how long an idempotency key is remembered after its
	// decrement began (see DecrementOnce), by the store's clock (see
	// storeTime). Default DefaultKeyRetention.
	KeyRetention time.Duration

	// AbandonAfter is how old an idempotency attempt of a replica that
	// still beats (or never did, see Store.Heartbeat) must be before
	// RecoverKeys gives it up. Giving up is safe at any time: it fences
	// the attempt's order id out of the item, so its stock write, if it
	// comes later, is refused. It decides only when a slow request is
	// failed so that a retry may sell; it should exceed the longest a
	// decrement can run. Default DefaultAbandonAfter.
	AbandonAfter time.Duration

	// DeadAfter is how long another store's heartbeat must stand still,
	// timed by this process's monotonic clock, before this store takes
	// that store for dead and gives up its idempotency attempts at once
	// (see Store.Heartbeat). Every store on a database must use the same
	// (see Store.CheckPeers). Default DefaultDeadAfter.
	DeadAfter time.Duration

	// AfterTake, when set, runs right after a stock write that took stock
	// and before its order is recorded: a hook for tests and fault drills
	// that stop a replica between the two writes.
	AfterTake func(inventory.Order)

	// Logger receives ledger failures. nil means slog.Default().
	Logger *slog.Logger
}

// Store reads and writes items and orders. It is safe for concurrent use.
type Store struct {
	items, orders, keys *mongo.Collection
	attempts, beats     *mongo.Collection
	holds               *mongo.Collection // settled holds (see holdRecord)
	// withHolds holds the skus this store has seen holds on (see
	// ReturnExpiredHolds).
	withHolds *skuSet
	// committedItems and committedOrders read with majority read concern
	// when writes are majority: a replay must not answer with a sale that
	// a failover can roll back. They are items and orders otherwise.
	committedItems, committedOrders *mongo.Collection
	// ttl is set once EnsureIndexes has made the server expire keys
	// itself; until then RecoverKeys expires them.
	ttl          *atomic.Bool
	wc           *writeconcern.WriteConcern // of every collection (see bind)
	replica      string
	writeTimeout time.Duration
	keyRetention time.Duration
	abandonAfter time.Duration
	deadAfter    time.Duration
	// instance names this Store in its heartbeats and attempts; it is
	// random, so that a restarted replica is a new instance.
	instance string
	live     *liveness
	// inFlight holds the order ids of this store's idempotency attempts
	// whose request still runs: any other attempt of this instance is
	// over, and may be settled at once.
	inFlight *skuSet
	// compact holds the skus whose aborted fences RecoverKeys compacts
	// next (see compactAborted).
	compact   *skuSet
	afterTake func(inventory.Order)
	logger    *slog.Logger
	// now is this process's clock. Only the monotonic part of its
	// readings is used for a safety decision (elapsed time); tests shift
	// its wall part to play a replica whose clock is wrong.
	now func() time.Time
	// clock estimates the store's clock (see storeTime).
	clock *storeClock
	// Tests' stand-ins for a pause (GC, CPU starvation, SIGSTOP), each run
	// when set: beforeStamp in ConfirmHold between its look at the store's
	// clock and the stamp write; afterConfirmRead right after it read the
	// hold, betweenConfirmWrites between its two writes, once its stamp was
	// judged in time; afterBeatRead in Heartbeat right after the heartbeats
	// are read, before the reading is judged; afterItemRead in read between
	// its read of an item and its reads of the item's buckets.
	beforeStamp, afterConfirmRead, betweenConfirmWrites func()
	afterBeatRead, afterItemRead                        func()
}

// NewStore returns a Store on the items and orders collections of db. It
// does no I/O; call EnsureCollections and EnsureIndexes once at start-up.
func NewStore(db *mongo.Database, opts StoreOptions) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil database", inventory.ErrInvalid)
	}
	wc := opts.WriteConcern
	if wc == nil {
		wc, _ = ParseWriteConcern("majority")
	}
	if !wc.Acknowledged() {
		return nil, fmt.Errorf("%w: unacknowledged write concern", inventory.ErrInvalid)
	}
	s := &Store{
		wc:           wc,
		replica:      opts.Replica,
		writeTimeout: positiveOr(opts.WriteTimeout, DefaultWriteTimeout),
		keyRetention: positiveOr(opts.KeyRetention, DefaultKeyRetention),
		abandonAfter: positiveOr(opts.AbandonAfter, DefaultAbandonAfter),
		deadAfter:    positiveOr(opts.DeadAfter, DefaultDeadAfter),
		instance:     newOrderID(),
		afterTake:    opts.AfterTake,
		logger:       cmp.Or(opts.Logger, slog.Default()),
		now:          time.Now,
		withHolds:    &skuSet{},
		ttl:          &atomic.Bool{},
		live:         &liveness{},
		inFlight:     &skuSet{},
		compact:      &skuSet{},
		clock:        &storeClock{},
	}
	s.bind(db)
	return s, nil
}

// positiveOr returns d, or def when d is not positive: an option not set.
func positiveOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// The server's codes for creating a collection that exists (MongoDB
// before 7.0, and FerretDB), and for an index that exists with other
// options (MongoDB).
const (
	codeNamespaceExists       = 48
	codeIndexOptionsConflict  = 85
	codeIndexKeySpecsConflict = 86
)

// EnsureCollections creates each of the store's collections that does not
// exist. It is idempotent, and safe to run from several replicas at once.
// Call it once at start-up, with a context of its own: a collection the
// store writes to first is otherwise created by that write, within its
// request's context, and on FerretDB v1 on PostgreSQL a creation cut off
// between its table and its catalogue entry leaves the collection
// unusable ("relation already exists" on every later creation).
//
// A collection that exists is left alone, so a user without the
// createCollection privilege can start against a prepared database; one
// that is a view is an error, since every write to it would fail.
func (s *Store) EnsureCollections(ctx context.Context) error {
	for _, c := range []*mongo.Collection{s.items, s.orders, s.keys, s.attempts, s.beats, s.holds} {
		if err := ensureCollection(ctx, c); err != nil {
			return fmt.Errorf("inventory: %w", err)
		}
	}
	return nil
}

// ensureCollection creates c unless it exists; an existing view is an
// error.
func ensureCollection(ctx context.Context, c *mongo.Collection) error {
	specs, err := c.Database().ListCollectionSpecifications(ctx, bson.D{{Key: "name", Value: c.Name()}})
	if err != nil {
		return fmt.Errorf("list collection %s: %w", c.Name(), err)
	}
	for _, sp := range specs {
		if sp.Type == "view" {
			return fmt.Errorf("%s is a view, not a collection", c.Name())
		}
		return nil
	}
	err = c.Database().CreateCollection(ctx, c.Name())
	var ce mongo.CommandError
	if err != nil && !(errors.As(err, &ce) && ce.Code == codeNamespaceExists) {
		return fmt.Errorf("create collection %s: %w", c.Name(), err)
	}
	return nil
}

// EnsureIndexes creates the index that lists a sku's orders by time and,
// where the server has them, a TTL index that expires idempotency keys
// after the key retention (RecoverKeys sweeps them too, for servers without
// TTL indexes). It is idempotent, and safe to run from several replicas at
// once.
func (s *Store) EnsureIndexes(ctx context.Context) error {
	_, err := s.orders.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys: bson.D{{Key: "sku", Value: 1}, {Key: "at", Value: 1}},
	})
	if err != nil {
		return fmt.Errorf("inventory: create orders index: %w", err)
	}
	_, err = s.keys.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: "at", Value: 1}},
		Options: options.Index().SetExpireAfterSeconds(int32(s.keyRetention / time.Second)),
	})
	var ce mongo.CommandError
	if errors.As(err, &ce) && (ce.Code == codeIndexOptionsConflict || ce.Code == codeIndexKeySpecsConflict) {
		// The index exists with another retention (a changed
		// --idempotency-retention, or replicas that differ): change it
		// in place, as the latest replica to start asks.
		err = s.keys.Database().RunCommand(ctx, bson.D{
			{Key: "collMod", Value: IdempotencyCollection},
			{Key: "index", Value: bson.D{
				{Key: "keyPattern", Value: bson.D{{Key: "at", Value: 1}}},
				{Key: "expireAfterSeconds", Value: int32(s.keyRetention / time.Second)},
			}},
		}).Err()
		if err == nil {
			s.logger.InfoContext(ctx, "changed the idempotency keys' TTL index to the key retention", slog.Duration("retention", s.keyRetention))
		}
	}
	ttl := err == nil
	if errors.As(err, &ce) && ce.Name == "NotImplemented" {
		s.logger.InfoContext(ctx, "the store has no TTL indexes: idempotency keys are swept by the periodic recovery only", slog.Any("error", err))
		_, err = s.keys.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "at", Value: 1}}})
	}
	if err != nil {
		return fmt.Errorf("inventory: create idempotency index: %w", err)
	}
	s.ttl.Store(ttl)
	return nil
}

// Put sets the stock of sku, creating the item if needed, and bumps its
// version. It never touches the fences or the pending orders: a holder
// paused with an old token must stay fenced out after a reset, or its late
// write would land on the fresh stock. Put takes no lock; it is an
// administrative reset. A decrement in flight that read the item before
// the reset cannot write over it: every stock write of a safe strategy is
// conditional on the version it read (ErrStale).
//
// Put is not idempotent under concurrent sales: sent twice with a sale in
// between, the second erases the sale. A Put whose answer was lost is
// ErrOutcomeUnknown, and must not be sent again blindly; Restock is the
// stock change that is safe to retry.
func (s *Store) Put(ctx context.Context, sku string, stock int64) (inventory.Item, error) {
	return s.put(ctx, sku, stock, nil)
}

// PutIf is Put conditional on the item's version: it sets the stock only if
// the item exists at version, and returns ErrStale (or ErrNotFound),
// having changed nothing, otherwise. It is the compare-and-set of a client
// that read the item and decided on a new stock from what it saw.
func (s *Store) PutIf(ctx context.Context, sku string, stock, version int64) (inventory.Item, error) {
	return s.put(ctx, sku, stock, &version)
}

func (s *Store) put(ctx context.Context, sku string, stock int64, version *int64) (inventory.Item, error) {
	if err := inventory.CheckSKU(sku); err != nil {
		return inventory.Item{}, err
	}
	if stock < 0 {
		return inventory.Item{}, fmt.Errorf("%w: stock %d must not be negative", inventory.ErrInvalid, stock)
	}
	// An item split across buckets (see Buckets) is put by putSplit.
	filter := bson.D{{Key: "_id", Value: sku}, {Key: "split", Value: bson.D{{Key: "$exists", Value: false}}}}
	if version != nil {
		filter = append(filter, bson.E{Key: "version", Value: *version})
	}
	// Like every write here, Put runs to completion once sent, so that
	// the caller learns whether the stock was set.
	cctx, cancel := s.commitContext(ctx)
	defer cancel()
	var it itemDoc
	err := s.items.FindOneAndUpdate(cctx, filter,
		bson.D{
			{Key: "$set", Value: bson.D{{Key: "stock", Value: stock}}},
			{Key: "$inc", Value: bson.D{{Key: "version", Value: int64(1)}}},
			{Key: "$setOnInsert", Value: bson.D{{Key: "fences", Value: bson.D{}}}},
		},
		options.FindOneAndUpdate().SetUpsert(version == nil).SetReturnDocument(options.After),
	).Decode(&it)
	if errors.Is(err, mongo.ErrNoDocuments) || mongo.IsDuplicateKeyError(err) {
		if sit, ok, serr := s.putSplit(ctx, sku, stock, version); ok || serr != nil {
			return sit.item(), serr
		}
		if version == nil {
			return s.put(ctx, sku, stock, nil) // unsplit meanwhile: put the item itself
		}
	}
	if version != nil && errors.Is(err, mongo.ErrNoDocuments) {
		cur, gerr := s.getDoc(ctx, s.items, sku)
		if gerr != nil {
			return inventory.Item{}, gerr
		}
		return inventory.Item{}, fmt.Errorf("%w: put %q at version %d (version now %d)", inventory.ErrStale, sku, *version, cur.Version)
	}
	if err != nil {
		// Sent and unanswered, the stock may have been set: that is not
		// "unavailable, nothing changed". Setting it again is not safe
		// either, because a sale may have come in between, which a second
		// set would erase: the caller must read the item to find out.
		return inventory.Item{}, unknownOutcome("put", sku, err)
	}
	return it.item(), nil
}

// Get returns the item, or ErrNotFound.
func (s *Store) Get(ctx context.Context, sku string) (inventory.Item, error) {
	it, err := s.getDoc(ctx, s.items, sku)
	return it.item(), err
}

// findDocs returns every document of c that filter matches; none is an
// empty slice, not nil (a page of no orders is [] in JSON).
func findDocs[T any](ctx context.Context, c *mongo.Collection, filter bson.D, opts ...options.Lister[options.FindOptions]) ([]T, error) {
	cur, err := c.Find(ctx, filter, opts...)
	if err != nil {
		return nil, err
	}
	docs := []T{}
	err = cur.All(ctx, &docs)
	return docs, err
}

// findByIDs reads the documents of c with the ids given, each by its own
// _id equality, at most 8 at once, and returns those found by id. One
// find with {_id: {$in: ids}} would be one request, but the embedded
// store (FerretDB v1) does not push $in down to its backend: it reads and
// decodes every document of c (300 ms for one id among 10,000 orders),
// where an _id equality is one indexed read.
func findByIDs[T any](ctx context.Context, c *mongo.Collection, ids []string) (map[string]T, error) {
	docs := make([]*T, len(ids))
	err := atMost(8, len(ids), func(i int) error {
		var d T
		switch err := c.FindOne(ctx, bson.D{{Key: "_id", Value: ids[i]}}).Decode(&d); {
		case err == nil:
			docs[i] = &d
		case !errors.Is(err, mongo.ErrNoDocuments):
			return err
		}
		return nil
	})
	found := map[string]T{}
	for i, d := range docs {
		if d != nil {
			found[ids[i]] = *d
		}
	}
	return found, err
}

// atMost runs f(0) to f(n-1), at most limit at once, and returns their
// errors joined.
func atMost(limit, n int, f func(i int) error) error {
	errs := make([]error, n)
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = f(i)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// getDoc is Get as the item document, read through items: a strategy
// that reads the item to answer sold out tells splitAware by its split
// whether the item held all of the sku's stock (see soldOutOf).
func (s *Store) getDoc(ctx context.Context, items *mongo.Collection, sku string) (itemDoc, error) {
	if err := inventory.CheckSKU(sku); err != nil {
		return itemDoc{}, err
	}
	var it itemDoc
	err := items.FindOne(ctx, bson.D{{Key: "_id", Value: sku}}).Decode(&it)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return itemDoc{}, fmt.Errorf("%w: get %q", inventory.ErrNotFound, sku)
	}
	if err != nil {
		return itemDoc{}, unreachable("get", sku, err)
	}
	return it, nil
}

// setStock writes stock unconditionally: the write of the unsafe strategy,
// and of a lock strategy whose fencing is off, which trusts the lock alone.
// It is kept as naive as the code it teaches, but is a sale write like
// every other: it bumps the version and records the pending order.
func (s *Store) setStock(ctx context.Context, stock int64, o inventory.Order) error {
	_, err := s.sell(ctx, sale{op: "write", sku: o.SKU, orders: []inventory.Order{o}, qty: o.Qty, stock: &stock, blind: true})
	return err
}

// abandoned is the error of a stock write of o refused because recovery
// gave o's attempt up first.
func abandoned(op string, o inventory.Order) error {
	return fmt.Errorf("%w: %s %q of order %s", inventory.ErrAbandoned, op, o.SKU, o.ID)
}

// unknownOutcome wraps the error of a stock write that got no definite
// answer. A write that matched nothing is a definite "not applied" and is
// reported by the callers as ErrFenced, ErrNotFound or a lost
// compare-and-set instead. A write that was never sent (neverSent: MongoDB
// could not be reached) took nothing: it is ErrStoreUnavailable.
func unknownOutcome(op, sku string, err error) error {
	if neverSent(err) {
		return notSent(op, sku, err)
	}
	return fmt.Errorf("%w: %s %q: %w", inventory.ErrOutcomeUnknown, op, sku, err)
}

// commitContext returns the context of a write that must run to completion
// once sent: it keeps ctx's values but not its cancellation, and is bounded
// by the store's write timeout instead (see StoreOptions.WriteTimeout).
// Within a recovery pass (see passContext) it is ctx itself: every write
// of a pass is retried by the next one, so the pass's deadline bounds its
// writes too.
func (s *Store) commitContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Value(passKey{}) != nil {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(context.WithoutCancel(ctx), s.writeTimeout)
}

// passKey marks the context of a recovery pass.
type passKey struct{}

// passContext returns the context of one recovery pass (RecoverPending,
// RecoverKeys): it ends by the store's write timeout, so that a link that
// went silent (packets dropped, no reset) fails the pass instead of
// holding up the next one for as long as the kernel keeps the connection.
// Everything a pass does is safe to cut off and do again.
func (s *Store) passContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	return context.WithValue(ctx, passKey{}, true), cancel
}
