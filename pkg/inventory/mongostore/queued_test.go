package mongostore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/pkg/lock"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// testQueued returns queued on s through a NATS connection of its own, as
// a replica has, with its consumers running until the test ends; locks
// grants the partitions' leases (one lock service for every replica of
// the test).
func testQueued(t *testing.T, s *Store, url string, locks *lock.Locker, opts QueuedOptions) *Queued {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	opts.Conn, opts.Locker = nc, locks
	db := s.items.Database().Name()
	opts.Prefix = QueuedPrefix(db)
	q, err := NewQueued(t.Context(), s, opts)
	if err != nil {
		t.Fatal(err)
	}
	// A NATS server of the machine (NATS_URL) outlives the test: it keeps
	// no stream of it.
	t.Cleanup(func() {
		if err := DeleteQueuedStream(context.Background(), nc, db, opts); err != nil {
			t.Error(err)
		}
	})
	return q
}

// testNATS returns a connection to a NATS server with JetStream of the
// test's own, closed at its end.
func testNATS(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(devstoretest.NATS(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// runFor starts q's consumers until the test ends.
func (q *Queued) runFor(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestQueuedSellsEachUnitOnce: two replicas, each publishing its buyers'
// sales and consuming the partitions whose lease it holds, sell three
// skus' stock exactly: every unit once, every buyer after the last unit
// told sold out, the ledger and the items agreeing.
func TestQueuedSellsEachUnitOnce(t *testing.T) {
	n := devstoretest.NATS(t)
	base := testStore(t)
	locks := localLocker(t)
	a := testQueued(t, replicaStore(t, base, StoreOptions{Replica: "a"}), n.URL, locks, QueuedOptions{})
	b := testQueued(t, replicaStore(t, base, StoreOptions{Replica: "b"}), n.URL, locks, QueuedOptions{})
	a.runFor(t)
	b.runFor(t)
	skus := []string{"q-one", "q-two", "q-three"}
	const stock, buyers = 20, 30
	for _, sku := range skus {
		mustPut(t, base, sku, stock)
	}
	var sold, soldOut atomic.Int64
	var wg sync.WaitGroup
	for i := range buyers * len(skus) {
		wg.Go(func() {
			q := a
			if i%2 == 1 {
				q = b
			}
			_, err := q.Decrement(t.Context(), inventory.Request{SKU: skus[i%len(skus)], Qty: 1})
			switch {
			case err == nil:
				sold.Add(1)
			case errors.Is(err, inventory.ErrSoldOut):
				soldOut.Add(1)
			default:
				t.Errorf("buyer %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if sold.Load() != stock*int64(len(skus)) || soldOut.Load() != (buyers-stock)*int64(len(skus)) {
		t.Errorf("sold %d, sold out %d; want %d and %d", sold.Load(), soldOut.Load(), stock*len(skus), (buyers-stock)*len(skus))
	}
	for _, sku := range skus {
		if _, _, got, err := unitsAddUp(t.Context(), base, sku, stock); err != nil || got != stock {
			t.Errorf("%s: sold %d (%v); want %d", sku, got, err, stock)
		}
		if n := mustCount(t, base, sku); n != stock {
			t.Errorf("%s: %d orders in the ledger, want %d", sku, n, stock)
		}
	}
}

// TestQueuedRedeliveredAfterACrash: a consumer stops after its sale write
// landed and before it recorded, answered or acknowledged (a crash). The
// log hands the sale out again; the next consumer finds the order pending
// in the item, records it and answers the buyer sold, without taking the
// units twice.
func TestQueuedRedeliveredAfterACrash(t *testing.T) {
	n := devstoretest.NATS(t)
	s := testStore(t)
	q := testQueued(t, s, n.URL, localLocker(t), QueuedOptions{AckWait: time.Second})
	var crashed atomic.Bool
	q.afterWrite = func(string) bool { return !crashed.CompareAndSwap(false, true) }
	q.runFor(t)
	mustPut(t, s, "q-crash", 5)
	sale, err := q.Decrement(t.Context(), inventory.Request{SKU: "q-crash", Qty: 2})
	if err != nil || !crashed.Load() {
		t.Fatalf("the sale whose consumer crashed after its write: %+v, %v (crashed %v); want sold", sale, err, crashed.Load())
	}
	if stock, _, sold, err := unitsAddUp(t.Context(), s, "q-crash", 5); err != nil || stock != 3 || sold != 2 {
		t.Fatalf("after the crash and the redelivery: stock %d, sold %d (%v); want 3 and 2", stock, sold, err)
	}
	if n := mustCount(t, s, "q-crash"); n != 1 {
		t.Fatalf("%d orders in the ledger, want 1", n)
	}
}

// TestQueuedAnswerLost: the consumer's write lands and its answer never
// comes (it stops there, as one whose link to the broker broke would, and
// the log hands the sale out again only after the buyer's wait): the
// buyer is told the sale the item holds, not outcome unknown.
func TestQueuedAnswerLost(t *testing.T) {
	n := devstoretest.NATS(t)
	s := testStore(t)
	q := testQueued(t, s, n.URL, localLocker(t), QueuedOptions{Wait: 500 * time.Millisecond, AckWait: time.Minute})
	var stopped atomic.Bool
	q.afterWrite = func(string) bool { return !stopped.CompareAndSwap(false, true) }
	q.runFor(t)
	mustPut(t, s, "q-lost", 5)
	sale, err := q.Decrement(t.Context(), inventory.Request{SKU: "q-lost", Qty: 2})
	if err != nil || !stopped.Load() || sale.Qty != 2 || sale.OrderID == "" {
		t.Fatalf("the sale whose answer was lost: %+v, %v (consumer stopped %v); want sold", sale, err, stopped.Load())
	}
	if stock, _, sold, err := unitsAddUp(t.Context(), s, "q-lost", 5); err != nil || stock != 3 || sold != 2 {
		t.Fatalf("stock %d, sold %d (%v); want 3 and 2", stock, sold, err)
	}
}

// TestQueuedSoldOutAfterTheWrite: three buyers of one sku with one unit
// in one batch: the first fits, the other two are short of it. The write
// misses (the first order given up meanwhile): the batch is decided
// again, the second buyer gets the unit, the third is told sold out. A
// sold out answered before the write landed would have refused the
// second buyer while the unit stayed unsold (the live page's race under
// load: a history not linearizable).
func TestQueuedSoldOutAfterTheWrite(t *testing.T) {
	n := devstoretest.NATS(t)
	s := testStore(t)
	q := testQueued(t, s, n.URL, localLocker(t), QueuedOptions{})
	const sku = "q-short"
	mustPut(t, s, sku, 1)
	var once sync.Once
	q.beforeWrite = func(_ string, orders []inventory.Order) {
		once.Do(func() {
			if _, err := s.items.UpdateOne(context.Background(), bson.D{{Key: "_id", Value: sku}},
				bson.D{{Key: "$set", Value: bson.D{{Key: "aborted." + orders[0].ID, Value: time.Now()}}}}); err != nil {
				t.Error(err)
			}
		})
	}
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := q.Decrement(t.Context(), inventory.Request{SKU: sku, Qty: 1})
			errs <- err
		}()
	}
	for st := (QueueState{}); st.Depth < 3; {
		time.Sleep(20 * time.Millisecond)
		var err error
		if st, err = q.State(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	q.runFor(t) // one batch of the three
	var sold, soldOut, abandoned int
	for range 3 {
		switch err := <-errs; {
		case err == nil:
			sold++
		case errors.Is(err, inventory.ErrSoldOut):
			soldOut++
		case errors.Is(err, inventory.ErrAbandoned):
			abandoned++
		default:
			t.Errorf("a buyer: %v", err)
		}
	}
	if sold != 1 || soldOut != 1 || abandoned != 1 {
		t.Errorf("sold %d, sold out %d, given up %d; want one each", sold, soldOut, abandoned)
	}
	if stock, _, got, err := unitsAddUp(t.Context(), s, sku, 1); err != nil || stock != 0 || got != 1 {
		t.Errorf("stock %d, sold %d (%v); want the unit sold", stock, got, err)
	}
}

// TestQueuedSoldOrderAgainAsNew: a sale already applied and in the
// ledger comes back as a message delivered for the first time (what a
// broker killed with its acknowledgement not yet on disk hands out, or a
// publish sent again after a restart, whose duplicate window no longer
// holds the message): it is answered sold, and no unit is taken twice.
func TestQueuedSoldOrderAgainAsNew(t *testing.T) {
	n := devstoretest.NATS(t)
	s := testStore(t)
	q := testQueued(t, s, n.URL, localLocker(t), QueuedOptions{})
	q.runFor(t)
	const sku = "q-again"
	mustPut(t, s, sku, 5)
	sale, err := q.Decrement(t.Context(), inventory.Request{SKU: sku, Qty: 2})
	if err != nil {
		t.Fatal(err)
	}
	var o inventory.Order
	if err := s.orders.FindOne(t.Context(), bson.D{{Key: "_id", Value: sale.OrderID}}).Decode(&o); err != nil {
		t.Fatal(err)
	}
	// The same order as a new message, under a message id of its own.
	nc := q.cfg.Conn
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(q.subject(partition(sku)))
	msg.Data, _ = json.Marshal(o)
	msg.Header.Set(queuedReplyHeader, inbox)
	if err := q.publish(t.Context(), msg, o, o.ID+".again"); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var a queuedAnswer
	if err := json.Unmarshal(m.Data, &a); err != nil || a.Code != "" {
		t.Fatalf("the sold order again: answer %s (%v); want sold", m.Data, err)
	}
	if stock, _, sold, err := unitsAddUp(t.Context(), s, sku, 5); err != nil || stock != 3 || sold != 2 {
		t.Fatalf("after the sold order came back as new: stock %d, sold %d (%v); want 3 and 2", stock, sold, err)
	}
}

// TestQueuedStreamMadeAgain: a stream that a broker restart took with it
// (a memory stream) is made again by the consumers: a buyer is told the
// store is unavailable (nothing sold) until then, and sells after.
func TestQueuedStreamMadeAgain(t *testing.T) {
	n := devstoretest.NATS(t)
	s := testStore(t)
	q := testQueued(t, s, n.URL, localLocker(t), QueuedOptions{Memory: true})
	q.runFor(t)
	const sku = "q-gone"
	mustPut(t, s, sku, 5)
	if _, err := q.Decrement(t.Context(), inventory.Request{SKU: sku, Qty: 1}); err != nil {
		t.Fatal(err)
	}
	if err := q.js.DeleteStream(t.Context(), q.streamCfg.Name); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := q.Decrement(t.Context(), inventory.Request{SKU: sku, Qty: 1})
		if err == nil {
			break
		}
		if !errors.Is(err, inventory.ErrStoreUnavailable) || time.Now().After(deadline) {
			t.Fatalf("a sale after the stream was lost: %v; want unavailable until the stream is back, then sold", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if stock, _, sold, err := unitsAddUp(t.Context(), s, sku, 5); err != nil || stock != 3 || sold != 2 {
		t.Fatalf("stock %d, sold %d (%v); want 3 and 2", stock, sold, err)
	}
}

// TestQueuedFencedOut: a consumer whose partition another replica has
// taken since (a higher token registered on the item by that replica's
// read) writes nothing; its buyer hears no answer within its wait and is
// told the outcome is unknown, and the stock is untouched.
func TestQueuedFencedOut(t *testing.T) {
	n := devstoretest.NATS(t)
	s := testStore(t)
	q := testQueued(t, s, n.URL, localLocker(t), QueuedOptions{Wait: 2 * time.Second, AckWait: time.Second})
	q.runFor(t)
	const sku = "q-fenced"
	mustPut(t, s, sku, 5)
	if _, err := s.fencedRead(t.Context(), sku, fmt.Sprintf("queued-p%d", partition(sku)), 1<<40); err != nil {
		t.Fatal(err)
	}
	if sale, err := q.Decrement(t.Context(), inventory.Request{SKU: sku, Qty: 1}); !errors.Is(err, inventory.ErrOutcomeUnknown) {
		t.Fatalf("a sale whose consumer is fenced out: %+v, %v; want the outcome unknown", sale, err)
	}
	if it := mustSnapshot(t, s, sku); it.Stock != 5 || len(it.Pending) != 0 {
		t.Fatalf("stock %d, pending %v after the fenced consumer; want 5 and none", it.Stock, it.Pending)
	}
}

// TestQueuedStreamOptions: the stream is made as the options say (files
// and the 2-minute window by default, memory), under the name
// QueuedStream gives, a stream of another storage beside the first; and a
// publish sent twice is one message under its message id, two without
// (NoDedup, the drill's knob).
func TestQueuedStreamOptions(t *testing.T) {
	n := devstoretest.NATS(t)
	s := testStore(t)
	db := s.items.Database().Name()
	for _, tc := range []struct {
		opts    QueuedOptions
		storage jetstream.StorageType
		copies  uint64
	}{
		{QueuedOptions{}, jetstream.FileStorage, 1},
		{QueuedOptions{Memory: true, NoDedup: true}, jetstream.MemoryStorage, 2},
	} {
		q := testQueued(t, s, n.URL, localLocker(t), tc.opts)
		info, err := q.stream.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if c := info.Config; c.Name != QueuedStream(db, tc.opts) || c.Storage != tc.storage || c.Duplicates != DefaultQueuedDedup || c.Replicas != 1 {
			t.Errorf("%+v: stream %s, storage %v, window %v, R%d; want %s, %v, %v, R1", tc.opts, c.Name, c.Storage, c.Duplicates, c.Replicas,
				QueuedStream(db, tc.opts), tc.storage, DefaultQueuedDedup)
		}
		o := inventory.Order{ID: fmt.Sprintf("o-%v", tc.opts.Memory), SKU: "q-opts"}
		id := o.ID + ".1"
		if tc.opts.NoDedup {
			id = ""
		}
		for range 2 { // the second as after a lost acknowledgement
			msg := nats.NewMsg(q.subject(partition(o.SKU)))
			msg.Data = []byte("{}")
			if err := q.publish(t.Context(), msg, o, id); err != nil {
				t.Fatal(err)
			}
		}
		if info, err = q.stream.Info(t.Context()); err != nil || info.State.Msgs != tc.copies {
			t.Errorf("%+v: a publish sent twice left %d messages (%v), want %d", tc.opts, info.State.Msgs, err, tc.copies)
		}
	}
}

// TestQueuedState: a buyer's sale waits in the log while no consumer
// runs: the log's depth and the replica's waiting buyer show it; once a
// consumer runs, the buyer is answered and both fall back to zero.
func TestQueuedState(t *testing.T) {
	n := devstoretest.NATS(t)
	s := testStore(t)
	q := testQueued(t, s, n.URL, localLocker(t), QueuedOptions{})
	mustPut(t, s, "q-state", 5)
	answered := make(chan error, 1)
	go func() {
		_, err := q.Decrement(t.Context(), inventory.Request{SKU: "q-state", Qty: 1})
		answered <- err
	}()
	var st QueueState
	for st.Depth != 1 || st.Waiting != 1 {
		select {
		case err := <-answered:
			t.Fatalf("answered with no consumer running: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		var err error
		if st, err = q.State(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if st.OldestWait <= 0 {
		t.Errorf("%+v: a buyer waits, and its wait is not counted", st)
	}
	q.runFor(t)
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
	// The consumer acknowledges the sale after its answer: the log is
	// empty soon after, never with the buyer still counted.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := q.State(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if st.Waiting != 0 || st.OldestWait != 0 {
			t.Fatalf("after the answer: %+v; want nobody waiting", st)
		}
		if st.Depth == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the answer: %+v; want the sale acknowledged, out of the log", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
