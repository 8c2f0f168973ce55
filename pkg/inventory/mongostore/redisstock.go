package mongostore

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// RedisStock holds a sku's stock in Redis while it sells (docs/redis-stock.md):
//
//	take.lua:    stock >= qty? stock -= qty, inflight += qty, sales[<id>] = {epoch, qty, at, ...}
//	batch write: updateOne({_id: sku, epoch: E, stock: {$gte: sum}, aborted.<id1>: {$exists: false}, ...},
//	                       {$inc: {stock: -sum, version: 1}, $set: {pending.<id1>: o1, ...}})
//	then:        the orders to the ledger, the sales out of Redis (done.lua), each sale answered
//
// MongoDB's item stays the truth. Redis holds a copy of its stock for one
// epoch, a counter in the item that every load into Redis bumps. The
// sales a replica took at one epoch go to the item in one write (group
// commit), and by default a sale is acknowledged only once its order is
// recorded. A batch the item refuses sold nothing: its sales start again
// from Redis, reloaded if it was behind. A PUT or a restock, which know
// nothing of Redis, are found that way (less stock than the batch) or
// when Redis says sold out and the item, less what Redis has in flight,
// still covers the sale: then too it reloads.
//
// Loading bumps the item's epoch and reads its stock in one update, then
// sets Redis if it holds an older epoch: a sale taken from an older copy
// (a Redis that lost its data, a paused replica) can never land, and the
// stock loaded counts every sale that did. Recover reloads a sku whose
// sales hash holds a sale older than a grace, the sale of a replica that
// died between take and write.
//
// With RedisStockOptions.AckAfterRedis (a demo knob) a sale is
// acknowledged right after take.lua and written behind, unconditionally:
// a Redis restart then sells units twice.
type RedisStock struct {
	store  *Store
	bg     *Store // Recover's
	rdb    redis.UniversalClient
	opts   RedisStockOptions // with the defaults
	logger *slog.Logger

	mu     sync.Mutex            // guards groups and their queues
	groups map[string]*saleGroup // the skus with sales on their way to MongoDB
}

// RedisStockOptions configures a RedisStock.
type RedisStockOptions struct {
	// Client is the Redis (or Redis Cluster) that holds the stock.
	Client redis.UniversalClient
	// KeyPrefix prefixes every key; see RedisStockKeyPrefix.
	KeyPrefix string
	// AckAfterRedis acknowledges a sale as soon as Redis took it and
	// writes it to MongoDB behind, every Flush: unsafe, for drills.
	AckAfterRedis bool
	// Wait, when positive, follows every take.lua with WAIT 1 Wait on the
	// same connection: a take that no Redis replica has acknowledged
	// within Wait is given back and the sale refused (nothing sold), so
	// that a failover to that replica cannot forget a sale acknowledged
	// from Redis. It does not make Redis a CP store (docs/redis-stock.md).
	Wait time.Duration
	// Flush is the write-behind interval of AckAfterRedis; default
	// DefaultRedisStockFlush.
	Flush time.Duration
	// Grace is how old a sale taken in Redis and not yet written must be
	// before it is taken for the sale of a replica that died between the
	// two: then the sku is reloaded (see Recover). It decides only when:
	// a reload is safe at any time. Default 5 s.
	Grace time.Duration
	// AfterTake, when set, runs right after take.lua took a sale and
	// before anything reaches MongoDB: a hook for tests that stop a
	// replica between the two.
	AfterTake func(inventory.Order)
	// Observer, when set, is told of every reload (for metrics).
	Observer RedisStockObserver
	// Background is the store Recover reads and reloads through: the
	// same database on a connection pool of its own (Store.Via), so that
	// a herd of sales holding every connection of the sales' pool cannot
	// starve the recovery. Without it, Recover uses the sales' store.
	Background *Store
}

// defaultRedisStockKeyPrefix is the prefix of redis-stock's keys.
const defaultRedisStockKeyPrefix = "stocklock:stock:"

// DefaultRedisStockFlush is the write-behind interval of AckAfterRedis.
const DefaultRedisStockFlush = 500 * time.Millisecond

// defaultRedisStockGrace is RedisStockOptions.Grace's default.
const defaultRedisStockGrace = 5 * time.Second

// RedisStockKeyPrefix returns the key prefix of a namespace (the replicas'
// database) under "stocklock:stock:", as the lock backends name
// theirs: replicas of different databases never share a copy.
func RedisStockKeyPrefix(namespace string) string {
	if namespace == "" {
		return defaultRedisStockKeyPrefix
	}
	return defaultRedisStockKeyPrefix + namespace + "/"
}

// errNoRedis is the error of building redis-stock without a Redis client.
var errNoRedis = errors.New("mongostore: redis-stock needs a Redis client")

var (
	//go:embed redisstock_take.lua
	takeLua string
	//go:embed redisstock_load.lua
	loadLua string
	//go:embed redisstock_done.lua
	doneLua string
	//go:embed redisstock_state.lua
	stateLua string

	takeScript  = redis.NewScript(takeLua)
	loadScript  = redis.NewScript(loadLua)
	doneScript  = redis.NewScript(doneLua)
	stateScript = redis.NewScript(stateLua)
)

// What take.lua answers.
const (
	takeTaken     = 1
	takeSoldOut   = 0
	takeNotLoaded = -1
	takeTwice     = -2
)

// redisStockAttempts bounds the takes of one sale whose batches the item
// refused (another epoch, or less stock than Redis held).
const redisStockAttempts = 8

// loadClaim is how long a replica that loads a sku into Redis keeps the
// others waiting for it (see load).
const loadClaim = time.Second

// maxBatch bounds the sales of one batch write: their pending entries go
// into the item document.
const maxBatch = 256

// NewRedisStock returns the redis-stock strategy on store.
func NewRedisStock(store *Store, opts RedisStockOptions) (*RedisStock, error) {
	if opts.Client == nil {
		return nil, errNoRedis
	}
	if opts.Flush <= 0 {
		opts.Flush = DefaultRedisStockFlush
	}
	if opts.Grace <= 0 {
		opts.Grace = defaultRedisStockGrace
	}
	if opts.Observer == nil {
		opts.Observer = nopRedisStockObserver{}
	}
	return &RedisStock{store: store, bg: cmp.Or(opts.Background, store), rdb: opts.Client, opts: opts, logger: store.logger, groups: map[string]*saleGroup{}}, nil
}

// Name returns strategy.RedisStock.
func (r *RedisStock) Name() string { return strategy.RedisStock }

// RedisStockKey returns the key of sku's stock hash under prefix (see
// RedisStockKeyPrefix). Every other key of the sku begins with it: the
// hash tag {sku} puts them all in one Redis Cluster slot.
func RedisStockKey(prefix, sku string) string { return prefix + "{" + sku + "}" }

// keys returns the stock hash and the sales hash of sku.
func (r *RedisStock) keys(sku string) []string {
	k := RedisStockKey(r.opts.KeyPrefix, sku)
	return []string{k, k + ":sales"}
}

// saleRecord is a sale as take.lua records it in the sales hash (it adds
// epoch, qty and at, the Redis server's time in ms).
type saleRecord struct {
	Replica string `json:"replica"`
	Key     string `json:"key,omitempty"`
}

// Decrement implements Strategy.
func (r *RedisStock) Decrement(ctx context.Context, req inventory.Request) (inventory.Sale, error) {
	o := r.store.newOrder(req, strategy.RedisStock, 0)
	rec, _ := json.Marshal(saleRecord{Replica: o.Replica, Key: o.Key})
	for range redisStockAttempts {
		res, err := r.take(ctx, req.SKU, req.Qty, o.ID, string(rec))
		if err != nil {
			// The script may have run: its units are then taken in Redis
			// with no write to come, and Recover reloads the sku after
			// the grace. Nothing is sold.
			return inventory.Sale{}, fmt.Errorf("%w: take %q in Redis: %w", inventory.ErrStoreUnavailable, req.SKU, err)
		}
		status, stock, epoch := res[0], res[1], res[2]
		switch status {
		case takeNotLoaded, takeTwice:
			reason := reloadRedisLost
			if status == takeTwice {
				reason = reloadRefused
			}
			if err := r.load(ctx, r.store, req.SKU, epoch, reason); err != nil {
				return inventory.Sale{}, err
			}
			continue
		case takeSoldOut:
			again, err := r.checkSoldOut(ctx, req.SKU, req.Qty, epoch, res[3])
			if err != nil {
				return inventory.Sale{}, err
			}
			if again {
				continue
			}
			return inventory.Sale{}, soldOut(req.SKU, stock, req.Qty)
		}
		if r.opts.AfterTake != nil {
			r.opts.AfterTake(o)
		}
		if r.opts.AckAfterRedis {
			o.Remaining = &stock
			r.enqueue(&pendingSale{o: o, epoch: epoch})
			return o.Sale(), nil
		}
		p := &pendingSale{o: o, epoch: epoch, done: make(chan struct{})}
		r.enqueue(p)
		<-p.done // the batch write runs to completion, whatever ctx does
		switch {
		case p.again:
			continue
		case p.err != nil:
			return inventory.Sale{}, p.err
		}
		return p.sale, nil
	}
	return inventory.Sale{}, fmt.Errorf("%w: redis-stock %q: the item refused %d batches (its epoch or stock moved)", inventory.ErrStale, req.SKU, redisStockAttempts)
}

// checkSoldOut looks behind a sold-out answer of Redis at epoch, with
// inflight units taken and not yet written. It is a sale-out only once the
// item says so: a read of the item after the answer must not show the
// units that Redis no longer has (the sales in flight may yet fail, and a
// sold-out answered while MongoDB still holds the units is not
// linearizable). So it waits for the units in flight to land or come
// back, or to be older than the grace (a dead replica's: it reloads). If
// the item's epoch has moved, or its stock less the units in flight
// still covers qty (a PUT or restock behind Redis's back, units of a dead
// replica's take), it reloads Redis and says to take again.
func (r *RedisStock) checkSoldOut(ctx context.Context, sku string, qty, epoch, inflight int64) (again bool, err error) {
	wait := time.Millisecond
	for {
		it, err := r.store.getDoc(ctx, r.store.items, sku)
		switch {
		case err != nil:
			return false, err
		case it.Stock < qty:
			return false, nil
		case it.Epoch != epoch || it.Stock-inflight >= qty:
			return true, r.load(ctx, r.store, sku, epoch, reloadItemAhead)
		}
		if err := pause(ctx, wait); err != nil {
			return false, err
		}
		wait = min(2*wait, 50*time.Millisecond)
		// Redis first, then the item: read in that order, the item's
		// stock is at most Redis's stock plus its units in flight.
		st, err := r.State(ctx, sku)
		if err != nil {
			return false, err
		}
		if st.Epoch != epoch || st.Stock >= qty {
			return true, nil
		}
		if st.OldestSale >= r.opts.Grace {
			return true, r.load(ctx, r.store, sku, epoch, reloadDeadTake)
		}
		inflight = st.Inflight
	}
}

// load puts sku's stock into Redis for a new epoch, unless Redis already
// holds an epoch above behind (someone else reloaded). It bumps the
// item's epoch and reads its stock in one update: every batch of an older
// epoch is refused from then on, and the stock counts every batch that
// was not. reason says why, for the observer (reloadRedisLost becomes
// reloadFirst when the item had never been loaded).
func (r *RedisStock) load(ctx context.Context, st *Store, sku string, behind int64, reason string) error {
	keys := r.keys(sku)
	loaded := func() bool {
		cur, err := r.rdb.HGet(ctx, keys[0], "epoch").Int64()
		return err == nil && cur > behind
	}
	if loaded() {
		return nil
	}
	// One replica loads, the others wait for it: two loads at once would
	// bump the epoch twice and refuse the first one's batches. The claim
	// only spares that work; the epoch alone makes a load safe, so a
	// claim that cannot be had for loadClaim is loaded without.
	claim := keys[0] + ":loading"
	if ok, err := r.rdb.SetNX(ctx, claim, st.instance, loadClaim).Result(); err == nil && !ok {
		for deadline := time.Now().Add(loadClaim); time.Now().Before(deadline); {
			if err := pause(ctx, 2*time.Millisecond); err != nil {
				return err
			}
			if loaded() {
				return nil
			}
		}
	} else if err == nil {
		defer r.rdb.Del(context.WithoutCancel(ctx), claim)
		if loaded() {
			return nil
		}
	}
	cctx, cancel := st.commitContext(ctx)
	defer cancel()
	var it itemDoc
	err := st.items.FindOneAndUpdate(cctx, bson.D{{Key: "_id", Value: sku}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "epoch", Value: int64(1)}}}},
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&it)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return fmt.Errorf("%w: load %q into Redis", inventory.ErrNotFound, sku)
	}
	if err != nil {
		// The bump may have landed: harmless, a later load bumps again.
		return unreachable("load into Redis", sku, err)
	}
	if err := loadScript.Run(cctx, r.rdb, keys, it.Epoch, it.Stock).Err(); err != nil {
		return fmt.Errorf("%w: load %q into Redis: %w", inventory.ErrStoreUnavailable, sku, err)
	}
	if reason == reloadRedisLost && it.Epoch == 1 {
		reason = reloadFirst
	}
	r.opts.Observer.RedisStockReloaded(sku, reason)
	r.logger.DebugContext(ctx, "redis-stock: loaded", slog.String("sku", sku), slog.Int64("epoch", it.Epoch), slog.Int64("stock", it.Stock))
	return nil
}

// pendingSale is a sale taken in Redis on its way to MongoDB.
type pendingSale struct {
	o     inventory.Order
	epoch int64
	// done is closed when the batch write settled it (nil with
	// AckAfterRedis); then again, err and sale say how.
	done  chan struct{}
	again bool           // not written: take it again from Redis
	err   error          // not written, and why
	sale  inventory.Sale // written, with its LedgerErr
}

// saleGroup queues a sku's sales for the one batch writer of the sku in
// this process. RedisStock.mu guards it; it leaves RedisStock.groups when
// its queue is drained.
type saleGroup struct {
	queue []*pendingSale
}

func (r *RedisStock) enqueue(p *pendingSale) {
	sku := p.o.SKU
	r.mu.Lock()
	g := r.groups[sku]
	start := g == nil
	if start {
		g = &saleGroup{}
		r.groups[sku] = g
	}
	g.queue = append(g.queue, p)
	r.mu.Unlock()
	if start {
		go r.writeLoop(sku, g)
	}
}

// writeLoop writes g's queue, a batch at a time, until it is empty: the
// sales that queue up behind one batch write go into the next.
func (r *RedisStock) writeLoop(sku string, g *saleGroup) {
	for {
		if r.opts.AckAfterRedis {
			time.Sleep(r.opts.Flush)
		}
		r.mu.Lock()
		if len(g.queue) == 0 {
			delete(r.groups, sku)
			r.mu.Unlock()
			return
		}
		epoch := g.queue[0].epoch
		var batch, rest []*pendingSale
		for _, p := range g.queue {
			if (r.opts.AckAfterRedis || p.epoch == epoch) && len(batch) < maxBatch {
				batch = append(batch, p)
			} else {
				rest = append(rest, p)
			}
		}
		g.queue = rest
		r.mu.Unlock()
		r.writeBatch(sku, epoch, batch)
	}
}

// writeBatch writes the sales of batch, all taken at epoch, to the item in
// one update, then to the ledger, and settles each.
func (r *RedisStock) writeBatch(sku string, epoch int64, batch []*pendingSale) {
	ctx, cancel := r.store.commitContext(context.Background())
	defer cancel()
	var after itemDoc
	var orders []inventory.Order // the batch's, as last written
	for {
		var sum int64
		orders = make([]inventory.Order, 0, len(batch))
		for _, p := range batch {
			sum += p.o.Qty
			orders = append(orders, p.o)
		}
		var err error
		after, err = r.store.write(ctx, sale{op: "redis-stock batch write", sku: sku, orders: orders, qty: sum,
			conds: []cond{epochIs(epoch)}, recorded: r.opts.AckAfterRedis}, nil, nil)
		if err == nil {
			break
		}
		if !errors.Is(err, errMissed) {
			// It may have landed: then its orders are pending in the item
			// and RecoverPending records them; if not, Recover reloads
			// the sku once their sales in Redis are past the grace.
			r.settle(batch, func(p *pendingSale) { p.err = err })
			return
		}
		if batch = r.refused(ctx, sku, epoch, batch); len(batch) == 0 {
			return
		}
	}
	// Clearing the sales from Redis and recording them in the ledger are
	// independent: run them side by side, and answer once both are done.
	var cleared sync.WaitGroup
	cleared.Go(func() {
		if err := r.release(ctx, sku, epoch, false, batch); err != nil {
			r.logger.WarnContext(ctx, "redis-stock: written to MongoDB, but not cleared from Redis; recovery reloads the sku",
				slog.String("sku", sku), slog.Any("error", err))
		}
	})
	// Each sale's remaining stock, in the order of the batch: the last
	// leaves what the item now holds.
	ptrs := make([]*inventory.Order, len(orders))
	for i := range orders {
		ptrs[i] = &orders[i]
	}
	remainings(ptrs, after.Stock)
	sales, recorded := r.store.recordBatch(ctx, orders)
	r.store.unpend(ctx, sku, recorded)
	cleared.Wait()
	for i, p := range batch {
		p.sale = sales[i]
	}
	r.settle(batch, func(*pendingSale) {})
}

// refused settles the sales of a batch the item refused, after reading
// it to learn why, and returns those to write again at once: the batch
// without the given-up attempts.
func (r *RedisStock) refused(ctx context.Context, sku string, epoch int64, batch []*pendingSale) []*pendingSale {
	it, err := r.store.getDoc(ctx, r.store.items, sku)
	if err == nil && r.opts.AckAfterRedis {
		err = fmt.Errorf("inventory: redis-stock write-behind of %q refused", sku)
	}
	if err != nil {
		r.settle(batch, func(p *pendingSale) { p.err = err })
		return nil
	}
	var abandonedSales, keep []*pendingSale
	for _, p := range batch {
		if gaveUp(it, p.o) {
			abandonedSales = append(abandonedSales, p)
		} else {
			keep = append(keep, p)
		}
	}
	if len(abandonedSales) > 0 {
		// Their writes can never land: their units go back.
		if err := r.release(ctx, sku, epoch, true, abandonedSales); err != nil {
			r.logger.WarnContext(ctx, "redis-stock: could not give the units of abandoned attempts back; recovery reloads the sku",
				slog.String("sku", sku), slog.Any("error", err))
		}
		r.settle(abandonedSales, func(p *pendingSale) { p.err = abandoned("redis-stock batch write", p.o) })
		if it.Epoch == epoch {
			return keep
		}
	}
	// Another epoch, or less stock than Redis held: Redis is behind the
	// item. Reload it once for the batch, and take every sale again.
	if err := r.load(ctx, r.store, sku, epoch, reloadRefused); err != nil {
		r.settle(keep, func(p *pendingSale) { p.err = err })
		return nil
	}
	r.settle(keep, func(p *pendingSale) { p.again = true })
	return nil
}

// settle marks each sale of batch by mark and wakes its request.
func (r *RedisStock) settle(batch []*pendingSale, mark func(*pendingSale)) {
	for _, p := range batch {
		mark(p)
		if p.done != nil {
			close(p.done)
		}
	}
}

// release forgets the sales of batch in Redis, giving their units back to
// the stock if give, if Redis still holds epoch.
func (r *RedisStock) release(ctx context.Context, sku string, epoch int64, give bool, batch []*pendingSale) error {
	args := []any{epoch, 0}
	if give {
		args[1] = 1
	}
	for _, p := range batch {
		args = append(args, p.o.ID)
	}
	return doneScript.Run(ctx, r.rdb, r.keys(sku), args...).Err()
}

// Recover reloads every sku whose sales hash in Redis holds a sale older
// than the grace (RedisStockOptions.Grace) by the Redis server's clock: a sale whose replica died (or
// stalled) between take.lua and its batch write. The reload bumps the
// item's epoch, so that the write, should it come, is refused, and puts
// the units back. It returns the number of skus reloaded. With
// AckAfterRedis it does nothing: the sales are written behind from memory.
func (r *RedisStock) Recover(ctx context.Context) (int, error) {
	if r.opts.AckAfterRedis {
		return 0, nil
	}
	cur, err := r.bg.items.Find(ctx, bson.D{{Key: "epoch", Value: bson.D{{Key: "$exists", Value: true}}}},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return 0, fmt.Errorf("inventory: find items held in Redis: %w", err)
	}
	var ids []itemDoc // their _id alone
	if err := cur.All(ctx, &ids); err != nil {
		return 0, fmt.Errorf("inventory: find items held in Redis: %w", err)
	}
	n := 0
	var errs []error
	for _, id := range ids {
		st, err := r.State(ctx, id.SKU)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st.Epoch < 0 || st.OldestSale < r.opts.Grace {
			continue
		}
		if err := r.load(ctx, r.bg, id.SKU, st.Epoch, reloadDeadTake); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
		r.logger.WarnContext(ctx, "redis-stock: reloaded a sku whose sale was taken in Redis and never written",
			slog.String("sku", id.SKU), slog.Int64("epoch", st.Epoch), slog.Duration("oldest_sale", st.OldestSale))
	}
	return n, errors.Join(errs...)
}

// RedisState is what Redis holds for a sku.
type RedisState struct {
	Epoch      int64         // -1 when not loaded
	Stock      int64         // units Redis can still sell
	Inflight   int64         // units taken and not yet written to MongoDB
	OldestSale time.Duration // age of the oldest sale not yet written; -1ms without one
}

// State returns what Redis holds for sku.
func (r *RedisStock) State(ctx context.Context, sku string) (RedisState, error) {
	res, err := stateScript.Run(ctx, r.rdb, r.keys(sku)).Int64Slice()
	if err != nil {
		return RedisState{}, fmt.Errorf("%w: read %q in Redis: %w", inventory.ErrStoreUnavailable, sku, err)
	}
	return RedisState{Epoch: res[0], Stock: res[1], Inflight: res[2], OldestSale: time.Duration(res[3]) * time.Millisecond}, nil
}

var _ = addBuilder(strategy.RedisStock, func(d Deps) (inventory.Strategy, error) {
	return NewRedisStock(d.Store, d.RedisStock)
})
