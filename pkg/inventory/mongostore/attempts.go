package mongostore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// abortedPath is the item field that marks order id as given up.
func abortedPath(id string) string { return "aborted." + id }

// abortedThrough is the item field below which every keyed order id is
// given up (see compactAborted).
const abortedThrough = "aborted_through"

// notAborted is the condition every stock write of o carries: its order
// has not been given up. With it, giving up an attempt and its write
// landing are decided by one document, whatever the clocks say. A keyed
// order (one whose id a key's reservation chose, see newOrderID) is given
// up when aborted.<id> is set, or when its id is not above
// aborted_through; an order without a key is never given up.
//
// A write that carries several orders (a batch) passes them all: the
// conditions go into one $and, since a filter holds each key once, and the
// lowest keyed id stands for the others against aborted_through.
func notAborted(os ...inventory.Order) bson.E {
	var conds bson.A
	lowest := ""
	for _, o := range os {
		conds = append(conds, bson.D{{Key: abortedPath(o.ID), Value: bson.D{{Key: "$exists", Value: false}}}})
		if o.Key != "" && (lowest == "" || o.ID < lowest) {
			lowest = o.ID
		}
	}
	if lowest != "" {
		conds = append(conds, bson.D{{Key: abortedThrough, Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$gte", Value: lowest}}}}}})
	}
	return bson.E{Key: "$and", Value: conds}
}

// gaveUp reports whether it refuses every stock write of o, the reading of
// notAborted. It also lets newOrderID learn the item's aborted_through, so
// that the orders this process mints from now on are above it.
func gaveUp(it itemDoc, o inventory.Order) bool {
	if _, ok := it.Aborted[o.ID]; ok {
		return true
	}
	seeTicket(it.AbortedThrough)
	return o.Key != "" && it.AbortedThrough != "" && o.ID <= it.AbortedThrough
}

// Order ids are tickets: 12 hex digits of the minting process's Unix time
// in milliseconds, then 20 random hex digits. Random, so that replicas
// need no coordination to mint unique ids (a duplicate in the ledger means
// an order recorded twice, never a collision); ordered by time, so that an
// item can give up every keyed order id up to one (aborted_through) in one
// field. The time orders nothing that safety rests on: it only makes
// tickets minted later compare higher, so that a new attempt is seldom
// below an item's aborted_through (see compactAborted).
const ticketTimeDigits = 12

// ticketsFrom is the lowest millisecond newOrderID mints a ticket at: one
// past the highest aborted_through this process has seen, so that a
// process whose clock is behind the others' is refused at most once per
// item, and mints above the floor from then on (a Lamport clock).
var ticketsFrom atomic.Int64

// newOrderID returns a new ticket (see ticketTimeDigits).
func newOrderID() string {
	ms := max(time.Now().UnixMilli(), ticketsFrom.Load())
	var b [10]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms.
	return fmt.Sprintf("%0*x", ticketTimeDigits, ms) + hex.EncodeToString(b[:])
}

// ticketMillis returns the minting time of ticket id, false when id is no
// ticket (an order id of another form, chosen by a caller).
func ticketMillis(id string) (int64, bool) {
	if len(id) != ticketTimeDigits+20 {
		return 0, false
	}
	ms, err := strconv.ParseInt(id[:ticketTimeDigits], 16, 64)
	return ms, err == nil
}

// seeTicket makes newOrderID mint above ticket id from now on.
func seeTicket(id string) {
	ms, ok := ticketMillis(id)
	if !ok {
		return
	}
	for {
		cur := ticketsFrom.Load()
		if ms < cur || ticketsFrom.CompareAndSwap(cur, ms+1) {
			return
		}
	}
}

// compactAborted moves the aborted.<order id> fences of sku whose order ids
// are below those of all its open attempts into aborted_through, in one
// update per document that holds them (the item, and each of its buckets,
// see Buckets):
//
//	filter: {_id: <the item or a bucket>}
//	update: {$max: {aborted_through: <the highest of them>}, $unset: {aborted.<id>: "", ...}}
//
// so that a document holds one fence per attempt given up that is younger
// than an attempt still open, not one per attempt ever given up.
//
// Why this is safe whatever the clocks and however late a write arrives:
// every stock write of a keyed order X requires aborted.X absent AND
// aborted_through absent or below X (notAborted), in the update that takes
// the stock, on the document it takes from. The update above removes
// aborted.X from a document only in the same write that makes that
// document's aborted_through at least X, and aborted_through only ever
// grows ($max). So from the fence on, at every instant, one of the two
// conditions refuses X on each document that was fenced: no write of X
// can land, whenever it is sent or delivered, by whichever replica.
// Nothing here rests on knowing that X's writes are over, which no store
// can know of a paused replica. The item is written before its buckets,
// with the highest id moved from any of them, so that its aborted_through
// is never below a bucket's: a read of the item alone (gaveUp) refuses
// every order a bucket refuses. The converse does not hold until the pass
// has written every bucket (or at all, when a split lands mid-pass), so a
// retry judges an attempt given up only when every document refuses it
// (outcome, view.refuses).
//
// What the order of the tickets buys is liveness only: an attempt Y still
// open with an id at or below aborted_through would be refused like a
// given-up one (it answers ErrAbandoned, frees its key, and its retry
// sells). So the fences moved are only those below every attempt of sku in
// the attempts collection, read after the documents, and minted at least
// AbandonAfter ago by this process's clock. The second condition covers
// the attempts not in the collection yet: a ticket is minted a moment
// before its attempt is inserted, and concurrent requests insert theirs in
// another order than they minted them, so a fence of a younger ticket may
// be above an attempt about to be inserted. An attempt inserted later than
// AbandonAfter after its ticket (its replica paused, or its clock behind
// by that much) can still be refused: the replica then learns the item's
// aborted_through (gaveUp) and mints above it. So a document holds the
// fences of the attempts given up within AbandonAfter, and those above an
// attempt still open.
//
// It reports the fences moved, and whether any is left to move later.
func (s *Store) compactAborted(ctx context.Context, sku string) (moved int, rest bool, err error) {
	v, err := s.read(ctx, s.committedItems, sku)
	if errors.Is(err, inventory.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	docs := v.fenced()
	if len(docs) == 0 {
		return 0, false, nil
	}
	open, err := findDocs[attempt](ctx, s.attempts, bson.D{{Key: "key_id", Value: bson.D{
		{Key: "$gte", Value: sku + "/"}, {Key: "$lt", Value: sku + "0"}, // "0" follows "/"
	}}})
	if err != nil {
		return 0, true, unreachable("read idempotency attempts of", sku, err)
	}
	low := "" // the lowest order id of an open attempt
	for _, a := range open {
		if low == "" || a.OrderID < low {
			low = a.OrderID
		}
	}
	due := time.Now().Add(-s.abandonAfter).UnixMilli()
	var through string
	unsets := make([]bson.D, len(docs))
	for i, d := range docs {
		for id := range d.aborted {
			if ms, ok := ticketMillis(id); !ok || ms > due || (low != "" && id >= low) {
				rest = rest || ok
				continue
			}
			unsets[i] = append(unsets[i], bson.E{Key: abortedPath(id), Value: ""})
			through = max(through, id)
		}
	}
	if through == "" {
		return 0, rest, nil
	}
	cctx, cancel := s.commitContext(ctx)
	defer cancel()
	for i, d := range docs { // the item first: see above
		if len(unsets[i]) == 0 && (d.id != sku || v.item.AbortedThrough >= through) {
			continue
		}
		update := bson.D{{Key: "$max", Value: bson.D{{Key: abortedThrough, Value: through}}}}
		if len(unsets[i]) > 0 {
			update = append(update, bson.E{Key: "$unset", Value: unsets[i]})
		}
		if _, err := s.items.UpdateOne(cctx, bson.D{{Key: "_id", Value: d.id}}, update); err != nil {
			return moved, true, unreachable("compact the given-up attempts of", sku, err)
		}
		moved += len(unsets[i])
	}
	seeTicket(through)
	return moved, rest, nil
}

// skuSet is a set of skus (or, Store.inFlight, of order ids), safe for
// concurrent use.
type skuSet struct{ m sync.Map }

func (s *skuSet) add(sku string)    { s.m.Store(sku, struct{}{}) }
func (s *skuSet) remove(sku string) { s.m.Delete(sku) }

// drain empties the set and returns what it held.
func (s *skuSet) drain() []string {
	var out []string
	s.m.Range(func(sku, _ any) bool {
		s.m.Delete(sku)
		out = append(out, sku.(string))
		return true
	})
	return out
}
