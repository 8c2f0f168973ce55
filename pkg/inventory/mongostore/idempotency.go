package mongostore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

const (
	// DefaultKeyRetention is how long an idempotency key is remembered.
	DefaultKeyRetention = 24 * time.Hour

	// DefaultAbandonAfter is StoreOptions.AbandonAfter's default, well
	// above the longest a decrement can run: the request budget, then up to
	// two commits of DefaultWriteTimeout (the fenced read and the stock
	// write).
	DefaultAbandonAfter = 5 * time.Minute

	// inProgressWait is how long DecrementOnce waits for a decrement with
	// the same key to finish before it answers ErrInProgress.
	inProgressWait = 2 * time.Second
)

// keyRecord is the reservation of an idempotency key, one document in the
// idempotency collection (doc.go, "Idempotency keys and attempts", says
// what each field means). Inserting it is what admits one decrement per
// key: the _id is unique.
//
// Keys are kept for the retention, so this collection is large. Every
// write to it on a decrement's path is an insert or names the document by
// _id alone, which every store serves from the _id index (FerretDB v1
// pushes no other filter down, and would read the whole collection).
type keyRecord struct {
	ID      string    `bson:"_id"`
	SKU     string    `bson:"sku"`
	Key     string    `bson:"key"`
	Request string    `bson:"request"`
	OrderID string    `bson:"order_id"`
	At      time.Time `bson:"at"`
	Freed   string    `bson:"freed,omitempty"`
}

// free reports whether the key may be taken again: its attempt sold nothing.
func (r keyRecord) free() bool { return r.Freed != "" && r.Freed == r.OrderID }

// attempt is a keyed decrement in flight, one document in the attempts
// collection, inserted before the key's reservation and deleted once the
// attempt is settled. So the collection holds only the attempts in flight
// and those whose replica died, and recovery reads it whole instead of
// searching the keys.
type attempt struct {
	OrderID  string    `bson:"_id"`
	KeyID    string    `bson:"key_id"`
	At       time.Time `bson:"at"`
	Instance string    `bson:"instance,omitempty"`
}

// key is the reservation a runs for, as far as a knows it: its sku is the
// key id up to its first slash, which no sku contains.
func (a attempt) key() keyRecord {
	sku, _, _ := strings.Cut(a.KeyID, "/")
	return keyRecord{ID: a.KeyID, SKU: sku, OrderID: a.OrderID}
}

// fingerprint identifies a request for its key: sku, qty and match.
func fingerprint(req inventory.Request, match string) string {
	h := sha256.Sum256([]byte(req.SKU + "\x00" + strconv.FormatInt(req.Qty, 10) + "\x00" + match))
	return hex.EncodeToString(h[:])
}

// DecrementOnce runs st.Decrement(req) at most once per sku and idempotency
// key req.Key, whichever replica is asked and however often:
//
//   - The first call reserves the key and decrements. If that decrement
//     fails having changed nothing, the reservation is dropped, so that a
//     retry may try again.
//   - A later call with the same key and the same request (sku, qty and
//     match, which stands for the rest of the request, such as its body)
//     returns the first call's sale, with replayed true, and sells nothing.
//   - A call with the same key and another request returns ErrKeyReused.
//   - A call that arrives while the first is still running waits for it
//     for a while, then returns ErrInProgress. If the first call's replica
//     is dead (see Heartbeat), or the first call has run past
//     AbandonAfter, it gives the first call up and decrements itself: the
//     first call's stock write, should it come after all, is refused
//     (ErrAbandoned), so that never both sell.
//
// Keys are remembered for the store's KeyRetention, counted from the first
// call. req.OrderID must be empty: the reservation chooses it.
func (s *Store) DecrementOnce(ctx context.Context, st inventory.Strategy, req inventory.Request, match string) (sale inventory.Sale, replayed bool, err error) {
	if err := req.Validate(); err != nil {
		return inventory.Sale{}, false, err
	}
	if !inventory.ValidKey(req.Key) {
		return inventory.Sale{}, false, fmt.Errorf("%w: idempotency key must be 1 to %d printable ASCII characters", inventory.ErrInvalid, inventory.MaxKeyLen)
	}
	if req.OrderID != "" {
		return inventory.Sale{}, false, fmt.Errorf("%w: DecrementOnce chooses the order id itself", inventory.ErrInvalid)
	}
	fp := fingerprint(req, match)
	if w, ok := layerOf[*soldOutShortcut](st); ok {
		if err := s.soldOutFirst(ctx, w, req, fp); err != nil {
			return inventory.Sale{}, false, err
		}
	}
	giveUp := time.Now().Add(inProgressWait)
	poll := 10 * time.Millisecond
	for {
		rec, mine, err := s.reserve(ctx, req, fp)
		if err != nil {
			return inventory.Sale{}, false, err
		}
		if mine {
			return s.decrementReserved(ctx, st, req, rec)
		}
		if rec.Request != fp {
			return inventory.Sale{}, false, fmt.Errorf("%w: idempotency key %q of %q", inventory.ErrKeyReused, req.Key, req.SKU)
		}
		sale, sold, aborted, err := s.outcome(ctx, rec)
		switch {
		case err != nil:
			return inventory.Sale{}, false, err
		case sold:
			return sale, true, nil
		case aborted:
			// Given up: no sale can come of it. Take the key over.
			next, ok, err := s.takeOver(ctx, rec, req, fp)
			if err != nil {
				return inventory.Sale{}, false, err
			}
			if ok {
				return s.decrementReserved(ctx, st, req, next)
			}
			continue
		}
		if gaveUp, err := s.giveUpIfOverdue(ctx, rec); err != nil {
			return inventory.Sale{}, false, err
		} else if gaveUp {
			continue
		}
		if time.Now().Add(poll).After(giveUp) {
			return inventory.Sale{}, false, fmt.Errorf("%w: idempotency key %q of %q", inventory.ErrInProgress, req.Key, req.SKU)
		}
		if err := pause(ctx, poll); err != nil {
			return inventory.Sale{}, false, err
		}
		poll = min(2*poll, 200*time.Millisecond)
	}
}

// soldOutFirst asks the sold-out shortcut (see soldout.go) about
// req before its key is reserved: a sold out its read justifies is the
// answer, with no write, if req's key names no attempt (none, or one
// freed for this same request): the reservation would be freed again
// when the strategy said sold out. The key is read after the item, so a
// reservation of the same key that it misses came after that read. A key
// that names an attempt (a sale to replay, one in flight, another
// request) is left to the reservation: nil.
func (s *Store) soldOutFirst(ctx context.Context, w *soldOutShortcut, req inventory.Request, fp string) error {
	err := w.readSoldOut(ctx, req)
	if err == nil || !errors.Is(err, inventory.ErrSoldOut) {
		return err
	}
	var cur keyRecord
	ferr := s.keys.FindOne(ctx, bson.D{{Key: "_id", Value: req.SKU + "/" + req.Key}}).Decode(&cur)
	switch {
	case errors.Is(ferr, mongo.ErrNoDocuments), ferr == nil && cur.free() && cur.Request == fp:
		w.obs.SoldOutAnswered(w.Name(), SoldOutByRead)
		return err
	case ferr != nil:
		return unreachable("read idempotency key", req.SKU, ferr)
	}
	return nil
}

// newKeyRecord returns a fresh reservation of req's key, with a new order
// id, stamped with an upper estimate of the store's clock, never this
// replica's (see the clock rule, clock.go).
func (s *Store) newKeyRecord(ctx context.Context, req inventory.Request, fp string) (keyRecord, error) {
	at, err := s.storeTime(ctx, true)
	if err != nil {
		return keyRecord{}, unreachable("stamp idempotency key of", req.SKU, err)
	}
	return keyRecord{
		ID: req.SKU + "/" + req.Key, SKU: req.SKU, Key: req.Key, Request: fp,
		OrderID: newOrderID(), At: at,
	}, nil
}

// reserve inserts the reservation of req's key, or reads the one that is
// already there; mine tells which. A key whose attempt sold nothing is
// taken over (see takeOver) if it was reserved for the same request (fp):
// a key keeps the fingerprint of the request it was first reserved for,
// freed or not, so one reserved for another request is answered as a key
// in use would be. A reservation that went away between the insert and
// the read is inserted again. A reservation that is mine is in s.inFlight
// until decrementReserved returns.
func (s *Store) reserve(ctx context.Context, req inventory.Request, fp string) (keyRecord, bool, error) {
	for {
		rec, mine, err := s.claim(ctx, req, fp, func(ctx context.Context, rec keyRecord) (bool, error) {
			_, err := s.keys.InsertOne(ctx, rec)
			if mongo.IsDuplicateKeyError(err) {
				return false, nil
			}
			return true, err
		})
		if err != nil || mine {
			return rec, mine, err
		}
		var cur keyRecord
		err = s.keys.FindOne(ctx, bson.D{{Key: "_id", Value: rec.ID}}).Decode(&cur)
		if errors.Is(err, mongo.ErrNoDocuments) {
			continue
		}
		if err != nil {
			return keyRecord{}, false, unreachable("read idempotency key", req.SKU, err)
		}
		if !cur.free() || cur.Request != fp {
			return cur, false, nil
		}
		if rec, ok, err := s.takeOver(ctx, cur, req, fp); err != nil || ok {
			return rec, ok, err
		}
	}
}

// takeOver reserves the key of cur for a fresh attempt of req, if cur
// still holds it: cur's attempt sold nothing, and none of it can (its key
// was freed, or its order id is aborted in the item). It replaces the
// document on a filter beyond _id, which FerretDB serves by reading the
// whole collection; it runs only when a key is used again after its
// attempt sold nothing. ok is false when another caller took it first.
func (s *Store) takeOver(ctx context.Context, cur keyRecord, req inventory.Request, fp string) (keyRecord, bool, error) {
	return s.claim(ctx, req, fp, func(ctx context.Context, rec keyRecord) (bool, error) {
		res, err := s.keys.ReplaceOne(ctx, bson.D{{Key: "_id", Value: cur.ID}, {Key: "order_id", Value: cur.OrderID}}, rec)
		return err == nil && res.ModifiedCount > 0, err
	})
}

// claim writes a fresh reservation rec of req's key with write, which
// reports false when another attempt holds the key; rec's attempt is
// recorded first (see beginAttempt). mine reports whether the key is
// rec's: then rec is in s.inFlight until decrementReserved returns;
// otherwise rec's attempt is settled here.
func (s *Store) claim(ctx context.Context, req inventory.Request, fp string, write func(context.Context, keyRecord) (bool, error)) (rec keyRecord, mine bool, err error) {
	if rec, err = s.newKeyRecord(ctx, req, fp); err != nil {
		return keyRecord{}, false, err
	}
	if err := s.beginAttempt(ctx, rec); err != nil {
		return keyRecord{}, false, err
	}
	cctx, cancel := s.commitContext(ctx)
	mine, err = write(cctx, rec)
	cancel()
	if err == nil && mine {
		return rec, true, nil
	}
	defer s.inFlight.remove(rec.OrderID)
	if err == nil {
		s.endAttempt(ctx, rec)
		return rec, false, nil
	}
	// The reservation may have landed: free it if it did, so that the key
	// is not held until recovery gives it up.
	s.freeKey(ctx, rec, false)
	return keyRecord{}, false, unreachable("reserve idempotency key", rec.SKU, err)
}

// decrementReserved runs the decrement of a key this call has reserved;
// its attempt is no longer in s.inFlight once it returns.
func (s *Store) decrementReserved(ctx context.Context, st inventory.Strategy, req inventory.Request, rec keyRecord) (inventory.Sale, bool, error) {
	defer s.inFlight.remove(rec.OrderID)
	req.OrderID = rec.OrderID
	sale, err := st.Decrement(ctx, req)
	switch {
	case err == nil:
		if sale.LedgerErr == nil {
			s.endAttempt(ctx, rec)
		}
		return sale, false, nil
	case errors.Is(err, inventory.ErrOutcomeUnknown):
		// The stock may be taken; the attempt must stay, so that a retry
		// finds the sale (pending or recorded) or, if there is none, this
		// replica's recovery gives it up: it is no longer in flight.
		return inventory.Sale{}, false, err
	}
	// Nothing was changed: free the key for a retry.
	s.freeKey(ctx, rec, true)
	return inventory.Sale{}, false, err
}

// outcome looks for the sale of a reservation: pending in the item (then it
// records it now, as recovery would), or in the ledger; failing both, it
// reports whether the attempt was given up (aborted: no sale, and none can
// come). The order is looked for in that order because recording moves it
// the other way (ledger insert, then pending removed): an order that
// exists before the look is seen by one of the two reads. An attempt is
// given up only while its order is not pending, so an abort seen in the
// first read with no order in the second means that no sale came of it,
// nor can.
//
// Given up means refused by every document a stock write of the attempt
// could land on: the item and, once split, each of its buckets (see
// view.refuses). The item alone is not enough: compactAborted raises the
// item's aborted_through before the buckets', and an attempt still in
// flight, with a ticket below it, may yet take from a bucket.
func (s *Store) outcome(ctx context.Context, rec keyRecord) (sale inventory.Sale, sold, aborted bool, err error) {
	v, err := s.read(ctx, s.committedItems, rec.SKU)
	if err != nil {
		return sale, false, false, err
	}
	cctx, cancel := s.commitContext(ctx)
	defer cancel()
	sale, found, err := s.saleIn(cctx, v.merged(), rec)
	if found {
		if err != nil {
			// The sale exists; only its recording failed. Replay it, and
			// say so as the first answer would have.
			sale.LedgerErr = fmt.Errorf("inventory: record order %s of %q: %w", rec.OrderID, rec.SKU, err)
		}
		return sale, true, false, nil
	}
	if sale, sold, err = s.saleRecorded(ctx, rec); err != nil || sold {
		return sale, sold, false, err
	}
	return sale, false, v.refuses(inventory.Order{ID: rec.OrderID, Key: rec.Key}), nil
}

// saleIn finds the sale of rec's attempt in it, an item with its buckets'
// pending orders (see view.merged): held there, a hold's create (see
// HoldOnce), or pending, which it records now, as recovery would. err is
// that recording's failure: the sale stands, only its order waits.
func (s *Store) saleIn(ctx context.Context, it itemDoc, rec keyRecord) (sale inventory.Sale, found bool, err error) {
	if _, ok := it.Holds[rec.OrderID]; ok {
		return heldSale(rec), true, nil
	}
	p, ok := it.Pending[rec.OrderID]
	if !ok {
		return inventory.Sale{}, false, nil
	}
	p.ID, p.SKU = rec.OrderID, rec.SKU
	return p.Sale(), true, s.record(ctx, p)
}

// saleRecorded finds the sale of rec's attempt where recording puts it:
// the ledger or, a hold's create, the holds collection.
func (s *Store) saleRecorded(ctx context.Context, rec keyRecord) (inventory.Sale, bool, error) {
	o, err := s.order(ctx, rec.SKU, rec.OrderID)
	if !errors.Is(err, inventory.ErrNotFound) {
		return o.Sale(), err == nil, err
	}
	switch _, err := s.holdRecorded(ctx, rec.SKU, rec.OrderID); {
	case err == nil:
		return heldSale(rec), true, nil
	case !errors.Is(err, inventory.ErrHoldNotFound):
		return inventory.Sale{}, false, err
	}
	return inventory.Sale{}, false, nil
}

// giveUpIfOverdue gives up the attempt of rec, found with no sale yet, if
// it is overdue (see overdue), and reports whether that settled anything.
func (s *Store) giveUpIfOverdue(ctx context.Context, rec keyRecord) (bool, error) {
	var a attempt
	err := s.attempts.FindOne(ctx, bson.D{{Key: "_id", Value: rec.OrderID}}).Decode(&a)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return false, nil
	case err != nil:
		return false, unreachable("read idempotency attempt", rec.SKU, err)
	}
	now, err := s.storeTime(ctx, false)
	if err != nil {
		return false, unreachable("decide whether to give up the idempotency attempt of", rec.SKU, err)
	}
	if !s.overdue(a, now) {
		return false, nil
	}
	// Settled by this call, or found sold: look again at once. Otherwise
	// (no item yet, an order recorded between two reads) wait as usual.
	sold, ended, err := s.settle(ctx, a)
	return sold || ended, err
}

// beginAttempt records rec's attempt, before its reservation is written:
// from then until it is settled, recovery can find it, whatever happens to
// this replica. If the insert landed despite an error, recovery gives it
// up. The attempt is in s.inFlight until the caller removes it.
func (s *Store) beginAttempt(ctx context.Context, rec keyRecord) error {
	s.inFlight.add(rec.OrderID)
	cctx, cancel := s.commitContext(ctx)
	defer cancel()
	if _, err := s.attempts.InsertOne(cctx, attempt{OrderID: rec.OrderID, KeyID: rec.ID, At: rec.At, Instance: s.instance}); err != nil {
		s.inFlight.remove(rec.OrderID)
		return unreachable("record idempotency attempt", rec.SKU, err)
	}
	return nil
}

// endAttempt deletes rec's attempt: its outcome is settled. It reports
// whether this call deleted it, which makes the caller the one that
// settles it.
func (s *Store) endAttempt(ctx context.Context, rec keyRecord) bool {
	cctx, cancel := s.commitContext(ctx)
	defer cancel()
	res, err := s.attempts.DeleteOne(cctx, bson.D{{Key: "_id", Value: rec.OrderID}})
	if err != nil {
		s.logger.WarnContext(ctx, "could not end an idempotency attempt; recovery will",
			slog.String("sku", rec.SKU), slog.String("order_id", rec.OrderID), slog.Any("error", err))
		return false
	}
	return res.DeletedCount == 1
}

// freeKey lets rec's key be taken again, its attempt having sold nothing.
//
// With owned, the caller knows the reservation landed and that its
// decrement changed nothing. While rec's attempt exists nobody else
// replaces or expires the key, so the key is marked free by _id alone, and
// the attempt is ended only after that: if either write fails, the
// attempt stays and recovery settles it. An attempt already gone was
// settled by recovery, which freed the key itself; it is left alone.
//
// Without owned, the caller does not know whether its reservation landed:
// it marks the key free only if it is still rec's, and leaves the attempt
// to recovery, which gives it up if the reservation lands after all. A
// freed key is kept, not deleted (see reserve).
func (s *Store) freeKey(ctx context.Context, rec keyRecord, owned bool) {
	cctx, cancel := s.commitContext(ctx)
	defer cancel()
	key := bson.D{{Key: "_id", Value: rec.ID}}
	var err error
	if owned {
		err = s.attempts.FindOne(cctx, bson.D{{Key: "_id", Value: rec.OrderID}}).Err()
		if errors.Is(err, mongo.ErrNoDocuments) {
			return
		}
	} else {
		key = append(key, bson.E{Key: "order_id", Value: rec.OrderID})
	}
	if err == nil {
		err = s.markFreed(cctx, key, rec.OrderID)
	}
	if err == nil && owned {
		s.endAttempt(ctx, rec)
	}
	if err != nil {
		s.logger.WarnContext(ctx, "could not free the idempotency key of a failed decrement; retries with it answer in progress until recovery frees it",
			slog.String("sku", rec.SKU), slog.String("order_id", rec.OrderID), slog.Any("error", err))
	}
}

// markFreed sets the key that filter names free for the attempt orderID.
// If another attempt has taken the key meanwhile, the mark names an order
// id that is not the key's, and frees nothing.
func (s *Store) markFreed(ctx context.Context, filter bson.D, orderID string) error {
	_, err := s.keys.UpdateOne(ctx, filter, bson.D{{Key: "$set", Value: bson.D{{Key: "freed", Value: orderID}}}})
	return err
}

// KeyRecovery counts what RecoverKeys did.
type KeyRecovery struct {
	Expired   int // keys older than the retention, forgotten
	Settled   int // attempts whose sale was found, ended
	Abandoned int // attempts with no sale, given up: their keys freed, their order ids aborted
	Compacted int // aborted fences moved into their item's aborted_through (see compactAborted)
}

// expireBatch bounds the keys one RecoverKeys looks at for expiry.
const expireBatch = 100

// overdue reports whether attempt a, not yet settled, may be given up now.
// It decides only when: giving up is safe at any time (see settle).
//
//   - An attempt of this store that is not in flight is over: its request
//     returned without settling it (its outcome was unknown, or a write
//     that would have settled it failed).
//   - An attempt of a store whose heartbeat has stood still for DeadAfter,
//     as this store saw it, is taken for dead.
//   - Any other attempt is given up once older than AbandonAfter: its
//     stamp and now are both the store's clock (see storeTime), now a
//     lower estimate of it.
func (s *Store) overdue(a attempt, now time.Time) bool {
	switch {
	case a.Instance == s.instance:
		return !s.inFlight.has(a.OrderID)
	case a.Instance != "" && s.live.dead(a.Instance, s.deadAfter):
		return true
	}
	return a.At.Before(now.Add(-s.abandonAfter))
}

// settle ends attempt a, giving it up unless its sale happened (see
// fenceOut): with no sale, a's key is freed, so that a retry may sell.
// ended reports whether this call ended the attempt (and so should count
// it); sold whether a sale came of it.
func (s *Store) settle(ctx context.Context, a attempt) (sold, ended bool, err error) {
	rec := a.key()
	sold, done, err := s.fenceOut(ctx, rec)
	if err != nil || !done {
		return false, false, err
	}
	if !sold {
		cctx, cancel := s.commitContext(ctx)
		defer cancel()
		var cur keyRecord
		err := s.keys.FindOne(ctx, bson.D{{Key: "_id", Value: rec.ID}}).Decode(&cur)
		switch {
		case err == nil && cur.OrderID == rec.OrderID && !cur.free():
			if err := s.markFreed(cctx, bson.D{{Key: "_id", Value: rec.ID}}, rec.OrderID); err != nil {
				return false, false, unreachable("free idempotency key "+rec.ID+" of", rec.SKU, err)
			}
		case err != nil && !errors.Is(err, mongo.ErrNoDocuments):
			return false, false, unreachable("read idempotency key "+rec.ID+" of", rec.SKU, err)
		}
	}
	return sold, s.endAttempt(ctx, rec), nil
}

// fenceOut gives up the attempt of rec unless its sale happened. It
// fences rec's order id out of the item: it sets aborted.<order id>, only
// if the order is not pending there. Every stock write requires that field
// absent, in the same single-document update that takes the stock, so from
// then on no sale of the attempt can land, however late its replica sends
// it. Then it looks for the sale: pending in the item (it records it), or
// in the ledger (recorded before the fence: recording inserts the order
// before it clears the pending entry). A sale found recorded before the
// fence is settled without one. With neither, no sale came of the
// attempt nor can. The fence set, the sku is compacted at the end of
// RecoverKeys: the fence moves into aborted_through, which refuses the
// attempt's writes just as well (see compactAborted).
//
// It reports whether a sale came of the attempt, and done false when it
// cannot tell yet: the attempt stays for the next pass. So does an attempt
// whose item does not exist: there is nothing to fence, and a write could
// land on an item created later; a retry of its key answers ErrNotFound
// meanwhile.
func (s *Store) fenceOut(ctx context.Context, rec keyRecord) (sold, done bool, err error) {
	sku, id := rec.SKU, rec.OrderID
	// A sale already recorded needs no fence.
	if _, sold, err := s.saleRecorded(ctx, rec); err != nil || sold {
		return sold, err == nil, err
	}
	cctx, cancel := s.commitContext(ctx)
	defer cancel()
	// An item split across buckets (see Buckets) is fenced in every bucket
	// first, and in the item last, on the bucket count seen here.
	k, err := s.bucketCount(ctx, s.items, sku)
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return false, false, unreachable("give up idempotency attempt "+id+" of", sku, err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	inBucket, buckets := false, any(bson.D{{Key: "$exists", Value: false}})
	if k > 0 {
		doc, err := s.fenceBuckets(cctx, sku, id, k, now)
		if err != nil {
			return false, false, err
		}
		s.compact.add(sku) // fences set in buckets, whatever follows: RecoverKeys compacts them
		inBucket, buckets = doc != "", k
	}
	if !inBucket {
		// A hold's create (see HoldOnce) is found by its hold as a sale by
		// its pending order: the fence requires neither in the item.
		res, err := s.items.UpdateOne(cctx, bson.D{{Key: "_id", Value: sku},
			{Key: pendingPath(id), Value: bson.D{{Key: "$exists", Value: false}}},
			{Key: holdPath(id), Value: bson.D{{Key: "$exists", Value: false}}},
			{Key: "buckets", Value: buckets}},
			bson.D{{Key: "$set", Value: bson.D{{Key: abortedPath(id), Value: now}}}})
		if err != nil {
			return false, false, unreachable("give up idempotency attempt "+id+" of", sku, err)
		}
		if res.MatchedCount > 0 {
			s.compact.add(sku) // a fence set: RecoverKeys compacts it
			_, sold, err := s.saleRecorded(ctx, rec)
			return sold, err == nil, err
		}
	}
	// Not fenced: the sale is pending (in a bucket or the item), or held
	// in the item; or the item is gone, or was split since the count.
	v, err := s.read(ctx, s.committedItems, sku)
	if errors.Is(err, inventory.ErrNotFound) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	if _, sold, err = s.saleIn(cctx, v.merged(), rec); err != nil {
		return false, false, unreachable("record order "+id+" of", sku, err)
	}
	// Not found: recorded between the reads, the next pass finds it in the
	// ledger (or, a hold, in the holds collection).
	return sold, sold, nil
}

// RecoverKeys settles the idempotency attempts that are overdue (see
// overdue): an attempt whose sale happened is ended; one with no sale is
// given up, and its key freed, so that a retry may sell. Giving up never
// rests on a clock: it fences the attempt's order id out of the item, so
// that a stock write of the attempt that comes later is refused
// (ErrAbandoned); the fences it set are then compacted into one field of
// the item (see compactAborted), so that the item does not grow with
// every attempt given up. It reads only the attempts collection (see
// attempt), never the retained keys, and it deletes the heartbeats of
// dead stores with no attempt left.
//
// Where the server has no TTL index it also forgets keys older than the
// retention, by the store's clock: at most expireBatch a pass, from the
// oldest stored. Running it on several replicas at once is safe.
//
// A pass ends by the store's write timeout (see passContext): on a link
// that went silent it returns an error instead of holding up the next.
func (s *Store) RecoverKeys(ctx context.Context) (KeyRecovery, error) {
	var r KeyRecovery
	ctx, cancel := s.passContext(ctx)
	defer cancel()
	now, err := s.storeTime(ctx, false)
	if err != nil {
		return r, fmt.Errorf("inventory: %w", err)
	}
	atts, err := findDocs[attempt](ctx, s.attempts, bson.D{})
	if err != nil {
		return r, fmt.Errorf("inventory: find idempotency attempts: %w", err)
	}
	withAttempts := map[string]bool{}
	var errs []error
	for _, a := range atts {
		if !s.overdue(a, now) {
			withAttempts[a.Instance] = true
			continue
		}
		// One attempt that cannot be settled now (err, or not ended) must
		// not hold up the others: it is tried again at the next pass.
		sold, ended, err := s.settle(ctx, a)
		switch {
		case !ended:
			withAttempts[a.Instance] = true
			errs = append(errs, err) // errors.Join drops a nil
		case sold:
			r.Settled++
		default:
			r.Abandoned++
		}
	}
	s.forgetDead(ctx, withAttempts)
	for _, sku := range s.compact.drain() {
		n, rest, err := s.compactAborted(ctx, sku)
		r.Compacted += n
		if rest {
			// Fences above an attempt still open, or not yet due: the
			// next pass looks again.
			s.compact.add(sku)
		}
		errs = append(errs, err)
	}
	if !s.ttl.Load() {
		r.Expired, err = s.expireKeys(ctx, now)
		errs = append(errs, err)
	}
	return r, errors.Join(errs...)
}

// expireKeys forgets the keys past the retention at now, a lower estimate
// of the store's clock that the keys are stamped with, among the first
// expireBatch stored (a find with no filter and a limit, which FerretDB
// serves with a LIMIT), unless their attempt is still open. Storage order
// is insertion order on SQLite, but not always on PostgreSQL, which reuses
// the space of deleted rows: there, and above expireBatch keys a pass,
// keys may outlive the retention on the embedded store, a temporary one.
// A MongoDB expires them with the TTL index and never runs this.
// Each delete is conditional on the key's order id, so that it never
// forgets a key taken again meanwhile; FerretDB serves that filter by
// reading the whole collection, so a pass with expired keys costs one such
// read per key (docs/embedded-store.md).
func (s *Store) expireKeys(ctx context.Context, now time.Time) (int, error) {
	recs, err := findDocs[keyRecord](ctx, s.keys, bson.D{}, options.Find().SetLimit(expireBatch))
	if err != nil {
		return 0, fmt.Errorf("inventory: read the oldest idempotency keys: %w", err)
	}
	n := 0
	for _, rec := range recs {
		if !rec.At.Before(now.Add(-s.keyRetention)) {
			continue
		}
		switch err := s.attempts.FindOne(ctx, bson.D{{Key: "_id", Value: rec.OrderID}}).Err(); {
		case err == nil:
			continue // its attempt is open
		case !errors.Is(err, mongo.ErrNoDocuments):
			return n, fmt.Errorf("inventory: read idempotency attempt: %w", err)
		}
		res, err := s.keys.DeleteOne(ctx, bson.D{{Key: "_id", Value: rec.ID}, {Key: "order_id", Value: rec.OrderID}})
		if err != nil {
			return n, fmt.Errorf("inventory: expire idempotency key: %w", err)
		}
		n += int(res.DeletedCount)
	}
	return n, nil
}
