package inventory

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

const (
	// DefaultKeyRetention is how long an idempotency key is remembered.
	DefaultKeyRetention = 24 * time.Hour

	// DefaultAbandonAfter is how old a reservation with no sale must be
	// before RecoverKeys drops it. It is well above the longest a decrement
	// can run: the request budget, then up to two commits of
	// DefaultWriteTimeout (the fenced read and the stock write).
	DefaultAbandonAfter = 5 * time.Minute

	// MaxKeyLen is the longest idempotency key accepted, in bytes.
	MaxKeyLen = 128

	// inProgressWait is how long DecrementOnce waits for a decrement with
	// the same key to finish before it answers ErrInProgress.
	inProgressWait = 2 * time.Second
)

// ValidKey reports whether key is an acceptable idempotency key: 1 to 128
// printable ASCII characters (space to tilde).
func ValidKey(key string) bool {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return false
		}
	}
	return true
}

// keyRecord is the reservation of an idempotency key, one document in the
// idempotency collection:
//
//	{_id: "<sku>/<key>", sku, key, request: <fingerprint>, order_id, at, done}
//
// Inserting it is what admits one decrement per key: the _id is unique.
// order_id is fixed before the decrement runs and becomes its order's id,
// so the outcome of the first attempt can always be found: in the ledger,
// or pending in the item.
type keyRecord struct {
	ID      string    `bson:"_id"`
	SKU     string    `bson:"sku"`
	Key     string    `bson:"key"`
	Request string    `bson:"request"`
	OrderID string    `bson:"order_id"`
	At      time.Time `bson:"at"`
	// Done is set once the order is in the ledger; until then RecoverKeys
	// may have to settle the reservation.
	Done bool `bson:"done,omitempty"`
}

// fingerprint identifies a request for its key: sku, qty and match.
func fingerprint(req Request, match string) string {
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
//     for a while, then returns ErrInProgress.
//
// Keys are remembered for the store's KeyRetention, counted from the first
// call. req.OrderID must be empty: the reservation chooses it.
func (s *Store) DecrementOnce(ctx context.Context, st Strategy, req Request, match string) (sale Sale, replayed bool, err error) {
	if err := req.check(); err != nil {
		return Sale{}, false, err
	}
	if !ValidKey(req.Key) {
		return Sale{}, false, fmt.Errorf("%w: idempotency key must be 1 to %d printable ASCII characters", ErrInvalid, MaxKeyLen)
	}
	if req.OrderID != "" {
		return Sale{}, false, fmt.Errorf("%w: DecrementOnce chooses the order id itself", ErrInvalid)
	}
	fp := fingerprint(req, match)
	giveUp := time.Now().Add(inProgressWait)
	poll := 10 * time.Millisecond
	for {
		rec, mine, err := s.reserve(ctx, req, fp)
		if err != nil {
			return Sale{}, false, err
		}
		if mine {
			return s.decrementReserved(ctx, st, req, rec)
		}
		if rec.Request != fp {
			return Sale{}, false, fmt.Errorf("%w: idempotency key %q of %q", ErrKeyReused, req.Key, req.SKU)
		}
		if sale, found, err := s.outcome(ctx, rec); err != nil || found {
			return sale, found, err
		}
		if time.Now().Add(poll).After(giveUp) {
			return Sale{}, false, fmt.Errorf("%w: idempotency key %q of %q", ErrInProgress, req.Key, req.SKU)
		}
		if err := pause(ctx, poll); err != nil {
			return Sale{}, false, err
		}
		poll = min(2*poll, 200*time.Millisecond)
	}
}

// reserve inserts the reservation of req's key, or reads the one that is
// already there; mine tells which. A reservation that was dropped between
// the insert and the read is inserted again.
func (s *Store) reserve(ctx context.Context, req Request, fp string) (keyRecord, bool, error) {
	for {
		rec := keyRecord{
			ID: req.SKU + "/" + req.Key, SKU: req.SKU, Key: req.Key, Request: fp,
			OrderID: newOrderID(), At: time.Now().UTC().Truncate(time.Millisecond),
		}
		cctx, cancel := s.commitContext(ctx)
		_, err := s.keys.InsertOne(cctx, rec)
		cancel()
		if err == nil {
			return rec, true, nil
		}
		if !mongo.IsDuplicateKeyError(err) {
			// The insert may have landed; drop it if it did, so that the
			// key is not held until RecoverKeys abandons it.
			s.dropReservation(ctx, rec)
			return keyRecord{}, false, unreachable("reserve idempotency key", req.SKU, err)
		}
		var cur keyRecord
		err = s.keys.FindOne(ctx, bson.D{{Key: "_id", Value: rec.ID}}).Decode(&cur)
		if errors.Is(err, mongo.ErrNoDocuments) {
			continue
		}
		if err != nil {
			return keyRecord{}, false, unreachable("read idempotency key", req.SKU, err)
		}
		return cur, false, nil
	}
}

// decrementReserved runs the decrement of a key this call has reserved.
func (s *Store) decrementReserved(ctx context.Context, st Strategy, req Request, rec keyRecord) (Sale, bool, error) {
	req.OrderID = rec.OrderID
	sale, err := st.Decrement(ctx, req)
	switch {
	case err == nil:
		if sale.LedgerErr == nil {
			s.markDone(ctx, rec)
		}
		return sale, false, nil
	case errors.Is(err, ErrOutcomeUnknown):
		// The stock may be taken; the reservation must stay, so that a
		// retry finds the sale (pending or recorded) or, if there is none,
		// RecoverKeys drops the key once the write can no longer land.
		return Sale{}, false, err
	}
	// Nothing was changed: free the key for a retry.
	s.dropReservation(ctx, rec)
	return Sale{}, false, err
}

// outcome looks for the sale of a reservation: pending in the item (then it
// records it now, as recovery would), or in the ledger. The order is
// looked for in that order because recording moves it the other way
// (ledger insert, then pending removed): an order that exists before the
// look is seen by one of the two reads.
func (s *Store) outcome(ctx context.Context, rec keyRecord) (Sale, bool, error) {
	it, err := s.Get(ctx, rec.SKU)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Sale{}, false, err
	}
	if p, ok := it.Pending[rec.OrderID]; ok {
		p.ID, p.SKU = rec.OrderID, rec.SKU
		cctx, cancel := s.commitContext(ctx)
		defer cancel()
		sale := p.sale()
		if err := s.record(cctx, p); err != nil {
			// The sale exists; only its recording failed. Replay it, and
			// say so as the first answer would have.
			sale.LedgerErr = fmt.Errorf("inventory: record order %s of %q: %w", p.ID, p.SKU, err)
		}
		return sale, true, nil
	}
	o, err := s.order(ctx, rec.SKU, rec.OrderID)
	switch {
	case err == nil:
		return o.sale(), true, nil
	case errors.Is(err, ErrNotFound):
		return Sale{}, false, nil
	}
	return Sale{}, false, err
}

func (s *Store) markDone(ctx context.Context, rec keyRecord) {
	cctx, cancel := s.commitContext(ctx)
	defer cancel()
	_, err := s.keys.UpdateOne(cctx, bson.D{{Key: "_id", Value: rec.ID}, {Key: "order_id", Value: rec.OrderID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "done", Value: true}}}})
	if err != nil {
		s.logger.WarnContext(ctx, "could not mark an idempotency key done; recovery will",
			slog.String("sku", rec.SKU), slog.String("order_id", rec.OrderID), slog.Any("error", err))
	}
}

// dropReservation deletes rec if it is still the reservation it was (the
// same order id) and its sale is not known to be done, so that it never
// drops a later caller's reservation or a settled one.
func (s *Store) dropReservation(ctx context.Context, rec keyRecord) {
	cctx, cancel := s.commitContext(ctx)
	defer cancel()
	_, err := s.keys.DeleteOne(cctx, bson.D{
		{Key: "_id", Value: rec.ID}, {Key: "order_id", Value: rec.OrderID},
		{Key: "done", Value: bson.D{{Key: "$ne", Value: true}}},
	})
	if err != nil {
		s.logger.WarnContext(ctx, "could not drop the reservation of a failed decrement; retries with its key answer in progress until recovery drops it",
			slog.String("sku", rec.SKU), slog.String("order_id", rec.OrderID), slog.Any("error", err))
	}
}

// KeyRecovery counts what RecoverKeys did.
type KeyRecovery struct {
	Expired   int // keys older than the retention, forgotten
	Settled   int // reservations whose sale was found, marked done
	Abandoned int // reservations with no sale, dropped
}

// RecoverKeys forgets idempotency keys older than the key retention (the
// TTL index does it too where the server has one), and settles the
// reservations that are older than AbandonAfter and not done: a sale that
// happened is marked done; a reservation with no sale, in the ledger or
// pending, is dropped, so that its key may be used again. Running it on
// several replicas at once is safe.
func (s *Store) RecoverKeys(ctx context.Context) (KeyRecovery, error) {
	var r KeyRecovery
	now := time.Now()
	res, err := s.keys.DeleteMany(ctx, bson.D{{Key: "at", Value: bson.D{{Key: "$lt", Value: now.Add(-s.keyRetention)}}}})
	if err != nil {
		return r, fmt.Errorf("inventory: expire idempotency keys: %w", err)
	}
	r.Expired = int(res.DeletedCount)
	cur, err := s.keys.Find(ctx, bson.D{
		{Key: "at", Value: bson.D{{Key: "$lt", Value: now.Add(-s.abandonAfter)}}},
		{Key: "done", Value: bson.D{{Key: "$ne", Value: true}}},
	})
	if err != nil {
		return r, fmt.Errorf("inventory: find unsettled idempotency keys: %w", err)
	}
	var recs []keyRecord
	if err := cur.All(ctx, &recs); err != nil {
		return r, fmt.Errorf("inventory: find unsettled idempotency keys: %w", err)
	}
	for _, rec := range recs {
		_, found, err := s.outcome(ctx, rec)
		if err != nil {
			return r, err
		}
		if found {
			s.markDone(ctx, rec)
			r.Settled++
			continue
		}
		s.dropReservation(ctx, rec)
		r.Abandoned++
	}
	return r, nil
}
