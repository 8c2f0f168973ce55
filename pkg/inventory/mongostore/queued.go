package mongostore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/strategy"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Queued serializes the sales of a sku through a durable log, NATS
// JetStream, and applies them in order:
//
//	buyer:    publish {order} to <prefix>.sales.<partition of sku>, message id = order id
//	          wait on its own inbox for the answer
//	consumer: (one per partition, across replicas: the holder of the
//	          partition's lease)
//	          fetch a batch, per sku in log order:
//	            fit the orders to the stock, in order
//	            one sale write of those that fit, fenced by the lease's token
//	            record them, answer each buyer, ack their messages
//
// The truth is still the item document: the log orders the sales, the
// sale write decides them. What each gap costs:
//
//   - a publish whose acknowledgement is lost is sent again with the same
//     message id (the order's and the call's), and the stream keeps one
//     (its duplicate window);
//   - a consumer that dies after its write and before its ack: the
//     messages come back (redelivered), and an order already pending in
//     the item or in the ledger is answered sold, not applied again; so
//     is one a crashed broker hands out again as new (see applied);
//   - a consumer that lost its lease while it wrote: its write carries its
//     token, which the next owner registered on the item at its first
//     read (FencedRead), so the late write is refused;
//   - a buyer who waits longer than Wait gets ErrOutcomeUnknown: the
//     order is in the log, and is applied or refused later; a keyed
//     buyer's retry gives the attempt up first (notAborted), so it is
//     never both.
type Queued struct {
	store  *Store
	cfg    QueuedOptions
	js     jetstream.JetStream
	stream jetstream.Stream
	// streamCfg is the stream as NewQueued made it.
	streamCfg jetstream.StreamConfig
	logger    *slog.Logger
	waits     waits // this replica's buyers waiting for their answers (State)

	// afterWrite, when set (by tests), runs after a consumer's sale write
	// landed and before it records, answers or acks: returning false stops
	// the consumer there, as a crash would.
	afterWrite func(sku string) bool
	// beforeWrite, when set (by tests), runs right before a consumer's
	// sale write of orders, after it decided them and their sold outs.
	beforeWrite func(sku string, orders []inventory.Order)
	// beforeAck, when set (by tests), runs after an answer was sent and
	// before its message is acknowledged: returning false leaves it
	// unacknowledged, as a crash there would.
	beforeAck func(o inventory.Order, a queuedAnswer) bool
}

// QueuedOptions configures Queued.
type QueuedOptions struct {
	Conn *nats.Conn // required
	// Prefix names the stream (upper-cased) and its subjects; a
	// database's own (QueuedPrefix) keeps two databases apart on one
	// server.
	Prefix string
	// Locker grants the lease on a partition: its holder is the one
	// consumer of the partition's sales. Required.
	Locker *lock.Locker
	// Wait bounds a buyer's wait for the answer (default 10 s); AckWait is
	// how long a fetched sale may go unacknowledged before the log hands
	// it out again (default 5 s).
	Wait, AckWait time.Duration
	// Memory keeps the stream in memory instead of files: faster, and a
	// broker restart loses what was not applied yet (docs/queued.md).
	Memory bool
	// Replicas is how many servers of a JetStream cluster keep the stream
	// (0: 1); a stream of R3 survives the loss of one.
	Replicas int
	// Dedup is the stream's duplicate window: a publish sent again within
	// it under the same message id is dropped (0: DefaultQueuedDedup).
	Dedup time.Duration
	// NoDedup publishes without a message id, so that the stream keeps
	// every copy of a publish sent again: a drill's knob (the fault "de-
	// duplication off"), never production's.
	NoDedup bool
	// ApplyDelay holds each fetched batch this long before it is applied:
	// a drill's slow consumer, never production's.
	ApplyDelay time.Duration
	Logger     *slog.Logger
}

// DefaultQueuedDedup is the stream's duplicate window unless
// QueuedOptions.Dedup says otherwise: JetStream's own default.
const DefaultQueuedDedup = 2 * time.Minute

// stream is the stream's name and subject prefix for these options: a
// stream of another storage or replication is another stream (JetStream
// changes neither in place), so that a replica configured so never finds
// the other's; the production default (files, R1) has the database's
// prefix as it is.
func (o QueuedOptions) stream() (name, prefix string) {
	prefix = o.Prefix
	if o.Memory {
		prefix += "_memory"
	}
	if o.Replicas > 1 {
		prefix += "_r" + strconv.Itoa(o.Replicas)
	}
	return queuedStream(prefix), prefix
}

// QueuedStream is the name of the stream of database db's queued
// strategy as a replica with opts (Prefix aside) names it.
func QueuedStream(db string, opts QueuedOptions) string {
	opts.Prefix = QueuedPrefix(db)
	name, _ := opts.stream()
	return name
}

// QueuedName is the strategy's name.
const QueuedName = strategy.Queued

// ErrNoNATS is the error of building queued without a NATS connection.
var ErrNoNATS = errors.New("mongostore: queued needs a NATS connection (NATS_URL)")

var _ = addBuilder(strategy.Queued, func(d Deps) (inventory.Strategy, error) {
	if d.NATS == nil {
		return nil, ErrNoNATS
	}
	// The partitions' leases come from the MongoDB lease service, which
	// every replica has.
	locker, err := d.locker(strategy.Info{Name: strategy.Queued, Lock: strategy.LockMongo})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := d.Queued
	opts.Conn, opts.Locker, opts.Prefix, opts.Logger = d.NATS, locker, QueuedPrefix(d.Store.items.Database().Name()), d.Logger
	return NewQueued(ctx, d.Store, opts)
})

// queuedPartitions is how many partitions the skus hash to: each has one
// consumer at a time. Fixed: a sku must hash to the same partition on
// every replica, and a partition's lease token is compared only with
// tokens of the same partition (the item's fence "queued-p<n>").
const queuedPartitions = 8

// queuedBatch is the most sales one fetch takes.
const queuedBatch = 64

// queuedReplyHeader carries the buyer's inbox.
const queuedReplyHeader = "Stocklock-Reply"

// QueuedPrefix is the stream prefix for database db.
func QueuedPrefix(db string) string {
	return "stocklock_" + notSubject.ReplaceAllString(db, "_")
}

var notSubject = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// NewQueued returns the queued strategy, creating (or updating) its
// stream: file storage (Memory aside), on Replicas servers, a duplicate
// window of Dedup, work-queue retention (a sale leaves the log once
// acknowledged).
func NewQueued(ctx context.Context, store *Store, cfg QueuedOptions) (*Queued, error) {
	if cfg.Conn == nil {
		return nil, ErrNoNATS
	}
	if cfg.Locker == nil {
		return nil, fmt.Errorf("%w: queued needs a lock for its partitions", inventory.ErrInvalid)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "stocklock"
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 10 * time.Second
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = 5 * time.Second
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	if cfg.Dedup <= 0 {
		cfg.Dedup = DefaultQueuedDedup
	}
	name, prefix := cfg.stream()
	cfg.Prefix = prefix
	q := &Queued{store: store, cfg: cfg, logger: cmpLogger(cfg.Logger, store)}
	js, err := jetstream.New(cfg.Conn)
	if err != nil {
		return nil, fmt.Errorf("inventory: queued: %w", err)
	}
	storage := jetstream.FileStorage
	if cfg.Memory {
		storage = jetstream.MemoryStorage
	}
	q.js = js
	q.streamCfg = jetstream.StreamConfig{
		Name: name, Subjects: []string{cfg.Prefix + ".sales.*"},
		Storage: storage, Replicas: cfg.Replicas, Retention: jetstream.WorkQueuePolicy, Duplicates: cfg.Dedup,
	}
	// A cluster that is still electing, or that two replicas ask at
	// once, may leave a request unanswered: ask again until ctx ends.
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		q.stream, err = js.CreateOrUpdateStream(actx, q.streamCfg)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, nats.ErrTimeout) {
			return nil, fmt.Errorf("inventory: queued: stream %s: %w", name, err)
		}
		q.logger.Warn("queued: the stream's creation went unanswered; asking again", slog.String("stream", name), slog.Any("error", err))
	}
	if err := ensureCollection(ctx, store.queuedOrders()); err != nil {
		return nil, fmt.Errorf("inventory: queued: %w", err)
	}
	return q, nil
}

func queuedStream(prefix string) string { return "SALES_" + prefix }

// DeleteQueuedStream deletes the stream of database db's queued sales
// (QueuedStream(db, opts)) from nc's server, with every sale it holds: the
// teardown of a database that is dropped. Deleting a stream that is not
// there is not an error.
func DeleteQueuedStream(ctx context.Context, nc *nats.Conn, db string, opts QueuedOptions) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("mongostore: queued stream of %q: %w", db, err)
	}
	if err := js.DeleteStream(ctx, QueuedStream(db, opts)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("mongostore: delete the queued stream of %q: %w", db, err)
	}
	return nil
}

func cmpLogger(l *slog.Logger, s *Store) *slog.Logger {
	if l != nil {
		return l
	}
	return s.logger
}

// Name returns QueuedName.
func (q *Queued) Name() string { return QueuedName }

// partition is the partition of sku.
func partition(sku string) int {
	h := fnv.New32a()
	h.Write([]byte(sku))
	return int(h.Sum32() % queuedPartitions)
}

func (q *Queued) subject(p int) string { return q.cfg.Prefix + ".sales." + strconv.Itoa(p) }

// queuedAnswer is a consumer's answer to one buyer.
type queuedAnswer struct {
	Remaining int64  `json:"remaining"`       // sold
	Code      string `json:"code,omitempty"`  // not sold: sold_out, abandoned, not_found
	Stock     int64  `json:"stock,omitempty"` // sold out: the stock it found
	Split     bool   `json:"split,omitempty"` // sold out of an item the buckets strategy split
}

// Decrement implements inventory.Strategy: publish, then wait for the
// consumer's answer.
func (q *Queued) Decrement(ctx context.Context, req inventory.Request) (inventory.Sale, error) {
	o := q.store.newOrder(req, QueuedName, 0)
	nc := q.cfg.Conn
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return inventory.Sale{}, fmt.Errorf("%w: queued decrement %q: subscribe: %w", inventory.ErrStoreUnavailable, req.SKU, err)
	}
	// The subscription goes to the server before the publish, on the
	// same connection: it is in place before any answer can come.
	defer func() { _ = sub.Unsubscribe() }()
	data, err := json.Marshal(o)
	if err != nil {
		return inventory.Sale{}, err
	}
	msg := nats.NewMsg(q.subject(partition(req.SKU)))
	msg.Data = data
	msg.Header.Set(queuedReplyHeader, inbox)
	// The message id is the order's and this call's: a publish sent again
	// because its acknowledgement was lost is a duplicate the stream
	// drops, and a new call for the same order (after a sold out: the
	// returning layer's second try) is a new message. NoDedup (a drill)
	// sends none.
	id := o.ID + "." + strconv.FormatUint(rand.Uint64(), 36)
	if q.cfg.NoDedup {
		id = ""
	}
	if err := q.publish(ctx, msg, o, id); err != nil {
		return inventory.Sale{}, err
	}
	wctx, cancel := context.WithTimeout(ctx, q.cfg.Wait)
	defer cancel()
	end := q.waits.begin()
	m, err := sub.NextMsgWithContext(wctx)
	end()
	if err != nil {
		// The answer is a message of its own, not in the log: lost with a
		// link to the broker, it may be for a sale that was decided. The
		// ledger and the refusals tell, once.
		lctx, lcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer lcancel()
		if st, serr := q.store.OrderState(lctx, req.SKU, o.ID); serr == nil && st.Sold {
			return st.Sale, nil
		} else if serr == nil && st.Err != nil {
			return inventory.Sale{}, st.Err
		}
		return inventory.Sale{}, fmt.Errorf("%w: queued decrement %q: order %s is in the log, and no answer came within %v: %w",
			inventory.ErrOutcomeUnknown, req.SKU, o.ID, q.cfg.Wait, err)
	}
	var a queuedAnswer
	if err := json.Unmarshal(m.Data, &a); err != nil {
		return inventory.Sale{}, fmt.Errorf("%w: queued decrement %q: answer %q: %w", inventory.ErrOutcomeUnknown, req.SKU, m.Data, err)
	}
	if a.Code != "" {
		return inventory.Sale{}, a.err(o)
	}
	o.Remaining = &a.Remaining
	return o.Sale(), nil
}

// publish sends msg, order o's, with message id id, again while the
// acknowledgement does not come (the stream keeps one of them; every one
// when id is "").
func (q *Queued) publish(ctx context.Context, msg *nats.Msg, o inventory.Order, id string) error {
	var err error
	for attempt := range 3 {
		if attempt > 0 && ctx.Err() != nil {
			break
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var opts []jetstream.PublishOpt
		if id != "" {
			opts = append(opts, jetstream.WithMsgID(id))
		}
		_, err = q.js.PublishMsg(pctx, msg, opts...)
		cancel()
		if err == nil {
			return nil
		}
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) {
			if attempt == 0 {
				// No stream took it: nothing is in the log.
				return fmt.Errorf("%w: queued decrement %q: publish: %w", inventory.ErrStoreUnavailable, o.SKU, err)
			}
		}
	}
	return fmt.Errorf("%w: queued decrement %q: order %s published, not acknowledged: %w", inventory.ErrOutcomeUnknown, o.SKU, o.ID, err)
}

// Run consumes the partitions this replica gets the lease of until ctx
// ends: each partition has a goroutine that waits for its lease, then
// applies its sales in order until the lease is lost.
func (q *Queued) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for p := range queuedPartitions {
		wg.Go(func() { q.own(ctx, p) })
	}
	wg.Wait()
}

// own holds partition p's lease and consumes under it, again and again.
func (q *Queued) own(ctx context.Context, p int) {
	key := fmt.Sprintf("queued-%s-p%d", q.cfg.Prefix, p)
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		lease, err := q.cfg.Locker.Acquire(actx, key)
		cancel()
		if err != nil {
			continue // another replica consumes it: wait again
		}
		gctx, gcancel := lease.Guard(ctx)
		err = q.consume(gctx, p, int64(lease.Token()))
		gcancel()
		_ = lease.Release(context.WithoutCancel(ctx))
		if err != nil && ctx.Err() == nil {
			q.logger.Warn("queued: a partition's consumer stopped; its lease is free for any replica", slog.Int("partition", p), slog.Any("error", err))
			_ = pause(ctx, 100*time.Millisecond)
		}
	}
}

// fetched is one message of the log, decoded.
type fetched struct {
	msg   jetstream.Msg
	order inventory.Order
}

// consume applies partition p's sales under the lease of token until ctx
// ends or the item refuses the token.
func (q *Queued) consume(ctx context.Context, p int, token int64) error {
	cc := jetstream.ConsumerConfig{
		Durable: fmt.Sprintf("p%d", p), FilterSubject: q.subject(p),
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: q.cfg.AckWait,
	}
	cons, err := q.js.CreateOrUpdateConsumer(ctx, q.streamCfg.Name, cc)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		// A broker restarted without it (a stream in memory): make it
		// again, or no sale is taken until this replica restarts. The
		// sales it held are gone; their buyers were told the outcome
		// is unknown, and none was applied.
		q.logger.Warn("queued: the stream is gone (a broker restarted, with the stream in memory): made again", slog.String("stream", q.streamCfg.Name))
		if _, err = q.js.CreateOrUpdateStream(ctx, q.streamCfg); err == nil {
			cons, err = q.js.CreateOrUpdateConsumer(ctx, q.streamCfg.Name, cc)
		}
	}
	if err != nil {
		return fmt.Errorf("consumer of partition %d: %w", p, err)
	}
	fence := fmt.Sprintf("queued-p%d", p)
	seen := &seenItems{m: map[string]*itemDoc{}} // skus whose item holds token, as last written
	checked := time.Now()
	for ctx.Err() == nil {
		msgs, err := fetch(cons)
		if err != nil {
			return fmt.Errorf("fetch from partition %d: %w", p, err)
		}
		// A server that lost the consumer (or its stream) does not always
		// say so to a fetch (nats-server 2.9 answers it with nothing): an
		// idle consumer asks for itself once a second.
		if len(msgs) == 0 && time.Since(checked) > time.Second {
			checked = time.Now()
			ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := cons.Info(ictx)
			cancel()
			if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
				return fmt.Errorf("partition %d: %w", p, err)
			}
		}
		var bySKU = map[string][]fetched{}
		var skus []string
		for _, m := range msgs {
			var o inventory.Order
			if err := json.Unmarshal(m.Data(), &o); err != nil || o.SKU == "" || o.ID == "" {
				q.logger.Error("queued: a message that is no order; dropped", slog.Int("partition", p), slog.Any("error", err))
				_ = m.Term()
				continue
			}
			f := fetched{msg: m, order: o}
			if _, ok := bySKU[o.SKU]; !ok {
				skus = append(skus, o.SKU)
			}
			bySKU[o.SKU] = append(bySKU[o.SKU], f)
		}
		if len(skus) > 0 && q.cfg.ApplyDelay > 0 {
			_ = pause(ctx, q.cfg.ApplyDelay) // a slow consumer (a drill)
		}
		// Each sku is a document of its own: the skus of a batch are
		// written at once, at most queuedWriters, each sku's sales in log
		// order.
		if err := atMost(queuedWriters, len(skus), func(i int) error {
			return q.apply(ctx, fence, token, seen, bySKU[skus[i]])
		}); err != nil {
			return err
		}
	}
	return context.Cause(ctx)
}

// queuedWriters is how many skus of one batch a consumer writes at once.
const queuedWriters = 8

// seenItems are the items of a partition's skus as its consumer last
// wrote them, under its token; its writers share it.
type seenItems struct {
	mu sync.Mutex
	m  map[string]*itemDoc
}

func (s *seenItems) get(sku string) *itemDoc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[sku]
}

// set notes it as sku's item; nil forgets it (read it again, fenced).
func (s *seenItems) set(sku string, it *itemDoc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if it == nil {
		delete(s.m, sku)
		return
	}
	s.m[sku] = it
}

// fetch waits up to 200 ms for the next sale of cons, then takes what
// else is there at once, up to queuedBatch in all: a sale waits for no
// batch to fill.
func fetch(cons jetstream.Consumer) ([]jetstream.Msg, error) {
	var msgs []jetstream.Msg
	first, err := cons.Fetch(1, jetstream.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		return nil, err
	}
	for m := range first.Messages() {
		msgs = append(msgs, m)
	}
	if len(msgs) == 0 {
		// A consumer or stream gone (a broker restarted without them)
		// answers every fetch with nothing but this error.
		if err := first.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, err
		}
		return nil, nil
	}
	rest, err := cons.FetchNoWait(queuedBatch - 1)
	if err != nil {
		return msgs, nil
	}
	for m := range rest.Messages() {
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// apply decides and writes the sales fs of one sku, in log order.
func (q *Queued) apply(ctx context.Context, fence string, token int64, seen *seenItems, fs []fetched) error {
	s := q.store
	sku := fs[0].order.SKU
	wctx, cancel := s.commitContext(ctx)
	defer cancel()
	it, fresh := seen.get(sku), false
	if it == nil {
		fresh = true
		read, err := s.fencedRead(wctx, sku, fence, token)
		switch {
		case errors.Is(err, inventory.ErrNotFound):
			for _, f := range fs {
				q.answer(f, queuedAnswer{Code: "not_found"})
			}
			return nil
		case err != nil:
			return err // fenced: another owner; or unreachable: again later
		}
		it = &read
	}
	// What the ledger and the recorded refusals say of these orders, read
	// at once: a sale delivered again is answered, never decided anew.
	var (
		done       map[string]bool
		refused    map[string]queuedAnswer
		derr, rerr error
		lookups    sync.WaitGroup
	)
	lookups.Go(func() { done, derr = q.applied(wctx, *it, fs) })
	lookups.Go(func() { refused, rerr = q.refusedBefore(wctx, fs) })
	lookups.Wait()
	if err := errors.Join(derr, rerr); err != nil {
		return err
	}
	var plan []fetched
	ids := map[string]bool{}
	for _, f := range fs {
		if ids[f.order.ID] {
			_ = f.msg.Ack() // the same order twice in one batch: once
			continue
		}
		ids[f.order.ID] = true
		if done[f.order.ID] {
			q.answer(f, queuedAnswer{Remaining: -1})
			continue
		}
		if a, ok := refused[f.order.ID]; ok {
			q.answer(f, a)
			continue
		}
		plan = append(plan, f)
	}
	widened := false
	for range takeAttempts {
		if !fresh && short(*it, plan) {
			// A sold out is decided from a read made now, never from the
			// item as this consumer last wrote it (a restock since).
			read, err := s.getDoc(wctx, s.items, sku)
			if err != nil {
				return err
			}
			it, fresh = &read, true
		}
		var fits, kept, shorts []fetched
		var orders []inventory.Order
		total := int64(0)
		for _, f := range plan {
			switch {
			case gaveUp(*it, f.order):
				q.answer(f, queuedAnswer{Code: "abandoned"})
				continue
			case f.order.Qty > it.Stock-total:
				shorts = append(shorts, f)
			default:
				fits = append(fits, f)
				orders = append(orders, f.order)
				total += f.order.Qty
			}
			kept = append(kept, f)
		}
		if len(shorts) > 0 && !widened {
			// Refused for the item's own stock only once the sku's
			// buckets and expired holds are back in it.
			widened = true
			if more, err := q.widen(wctx, *it); err != nil {
				return err
			} else if more {
				read, err := s.getDoc(wctx, s.items, sku)
				if err != nil {
					return err
				}
				it, fresh, plan = &read, true, kept
				continue
			}
		}
		// A sold out holds only once the units before it in the log are
		// taken: it is answered after the write that takes them lands,
		// never before (a write that misses, or is fenced, leaves them).
		soldOut := func(left itemDoc) {
			for _, f := range shorts {
				q.answer(f, queuedAnswer{Code: "sold_out", Stock: left.Stock, Split: left.Split != nil})
			}
		}
		if total == 0 {
			soldOut(*it)
			seen.set(sku, it)
			return nil
		}
		if q.beforeWrite != nil {
			q.beforeWrite(sku, orders)
		}
		after, err := s.write(wctx, sale{op: "queued write", sku: sku, orders: orders, qty: total,
			conds: []cond{fenceIs("queued write", fence, token)}}, nil, nil)
		if errors.Is(err, errMissed) {
			read, err := s.getDoc(wctx, s.items, sku)
			if err != nil {
				return err
			}
			if err := fenceIs("queued write", fence, token).refused(read); err != nil {
				seen.set(sku, nil)
				return err // another replica owns the partition now
			}
			it, fresh, plan = &read, true, kept // an attempt given up, or less stock: decide again
			continue
		}
		if err != nil {
			seen.set(sku, nil)
			return err // unknown: the messages come back, and are checked
		}
		seen.set(sku, &after)
		if q.afterWrite != nil && !q.afterWrite(sku) {
			return errors.New("stopped after the write (test)")
		}
		q.record(wctx, after, fits)
		soldOut(after)
		return nil
	}
	return fmt.Errorf("%w: queued write of %q: the item kept changing", inventory.ErrConflict, sku)
}

// short reports whether it cannot cover every order of plan.
func short(it itemDoc, plan []fetched) bool {
	total := int64(0)
	for _, f := range plan {
		total += f.order.Qty
	}
	return total > it.Stock
}

// applied returns the orders of fs already applied, whether or not their
// messages say they were delivered before: in the ledger, or pending in
// it, the item as this consumer read it under its fence or last wrote it
// (only it writes the item since). A pending one is recorded here, as its
// first consumer would have. A broker that crashed can hand a sale out
// again as new (its consumer's state, or the acknowledgement that removed
// it from the log, not yet on disk), and a publish sent again after the
// restart is no duplicate of a message the log no longer holds: the
// ledger, not the log, says what was sold.
func (q *Queued) applied(ctx context.Context, it itemDoc, fs []fetched) (map[string]bool, error) {
	s := q.store
	sold, err := findByIDs[inventory.Order](ctx, s.orders, orderIDs(fs))
	if err != nil {
		return nil, unreachable("find the orders of", it.SKU, err)
	}
	done := map[string]bool{}
	for id := range sold {
		done[id] = true
	}
	for _, f := range fs {
		o, ok := it.Pending[f.order.ID]
		if !ok || done[o.ID] {
			continue
		}
		done[o.ID] = true
		if _, err := s.recordIn(ctx, it.SKU, o, stepTimer{}); err != nil {
			q.logger.Debug("queued: an applied order left pending for recovery", slog.String("order_id", o.ID), slog.Any("error", err))
		}
	}
	return done, nil
}

// record puts the orders of sold, whose stock one write took leaving
// after, into the ledger, answers each buyer with the stock left as if
// sold one by one in log order, and acks their messages.
func (q *Queued) record(ctx context.Context, after itemDoc, sold []fetched) {
	s := q.store
	orders := make([]inventory.Order, len(sold))
	ptrs := make([]*inventory.Order, len(sold))
	for i, f := range sold {
		orders[i] = f.order
		ptrs[i] = &orders[i]
	}
	remainings(ptrs, after.Stock)
	errs := s.insertOrders(ctx, orders)
	var recorded []string
	for i, f := range sold {
		if errs[i] == nil {
			recorded = append(recorded, orders[i].ID)
		}
		q.answer(f, queuedAnswer{Remaining: *orders[i].Remaining})
	}
	if len(recorded) > 0 {
		if _, err := s.items.UpdateOne(ctx, bson.D{{Key: "_id", Value: after.SKU}}, bson.D{{Key: "$unset", Value: unsetPending(recorded)}}); err != nil {
			q.logger.Debug("queued: pending entries left for recovery", slog.String("sku", after.SKU), slog.Any("error", err))
		}
	}
}

// answer tells f's buyer a, and acks f's message: the sale is decided.
// A refusal is recorded first (see recordRefusal); unrecorded, it is not
// sent, and the message, not acknowledged, comes back.
func (q *Queued) answer(f fetched, a queuedAnswer) {
	if a.Code != "" && !q.recordRefusal(f, a) {
		return
	}
	if inbox := f.msg.Headers().Get(queuedReplyHeader); inbox != "" {
		data, _ := json.Marshal(a)
		_ = q.cfg.Conn.Publish(inbox, data)
	}
	if q.beforeAck != nil && !q.beforeAck(f.order, a) {
		return
	}
	_ = f.msg.Ack()
}
