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
	"go.mongodb.org/mongo-driver/v2/mongo/options"
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
//	{_id: "<sku>/<key>", sku, key, request: <fingerprint>, order_id, at, freed}
//
// Inserting it is what admits one decrement per key: the _id is unique.
// order_id is fixed before the decrement runs and becomes its order's id,
// so the outcome of the attempt can always be found: in the ledger, or
// pending in the item. freed equal to order_id says that the attempt sold
// nothing and the key may be taken again.
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
// collection:
//
//	{_id: <order id>, key_id: "<sku>/<key>", at}
//
// It is inserted before the key's reservation and deleted, by _id, once the
// attempt is settled: its sale recorded, or its key freed. So the
// collection holds only the attempts in flight and those whose replica
// died, and recovery reads it whole instead of searching the keys.
type attempt struct {
	OrderID string    `bson:"_id"`
	KeyID   string    `bson:"key_id"`
	At      time.Time `bson:"at"`
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
// already there; mine tells which. A key whose attempt sold nothing is
// taken over, and a reservation that went away between the insert and the
// read is inserted again.
func (s *Store) reserve(ctx context.Context, req Request, fp string) (keyRecord, bool, error) {
	for {
		rec := keyRecord{
			ID: req.SKU + "/" + req.Key, SKU: req.SKU, Key: req.Key, Request: fp,
			OrderID: newOrderID(), At: time.Now().UTC().Truncate(time.Millisecond),
		}
		if err := s.beginAttempt(ctx, rec); err != nil {
			return keyRecord{}, false, err
		}
		cctx, cancel := s.commitContext(ctx)
		_, err := s.keys.InsertOne(cctx, rec)
		cancel()
		if err == nil {
			return rec, true, nil
		}
		if !mongo.IsDuplicateKeyError(err) {
			// The reservation may have landed: free it if it did, so that
			// the key is not held until recovery abandons it.
			s.freeKey(ctx, rec, false)
			return keyRecord{}, false, unreachable("reserve idempotency key", req.SKU, err)
		}
		s.endAttempt(ctx, rec)
		var cur keyRecord
		err = s.keys.FindOne(ctx, bson.D{{Key: "_id", Value: rec.ID}}).Decode(&cur)
		if errors.Is(err, mongo.ErrNoDocuments) {
			continue
		}
		if err != nil {
			return keyRecord{}, false, unreachable("read idempotency key", req.SKU, err)
		}
		if !cur.free() {
			return cur, false, nil
		}
		if rec, ok, err := s.takeOver(ctx, cur, rec); err != nil || ok {
			return rec, ok, err
		}
	}
}

// takeOver reserves a freed key for rec, if it is still the freed cur. It
// replaces the document on a filter beyond _id, which FerretDB serves by
// reading the whole collection; it runs only when a key is used again
// after its attempt sold nothing.
func (s *Store) takeOver(ctx context.Context, cur, rec keyRecord) (keyRecord, bool, error) {
	if err := s.beginAttempt(ctx, rec); err != nil {
		return keyRecord{}, false, err
	}
	cctx, cancel := s.commitContext(ctx)
	res, err := s.keys.ReplaceOne(cctx, bson.D{
		{Key: "_id", Value: cur.ID}, {Key: "order_id", Value: cur.OrderID}, {Key: "freed", Value: cur.OrderID},
	}, rec)
	cancel()
	if err != nil {
		s.freeKey(ctx, rec, false)
		return keyRecord{}, false, unreachable("reserve idempotency key", rec.SKU, err)
	}
	if res.ModifiedCount == 0 {
		// Another caller took it first.
		s.endAttempt(ctx, rec)
		return keyRecord{}, false, nil
	}
	return rec, true, nil
}

// decrementReserved runs the decrement of a key this call has reserved.
func (s *Store) decrementReserved(ctx context.Context, st Strategy, req Request, rec keyRecord) (Sale, bool, error) {
	req.OrderID = rec.OrderID
	sale, err := st.Decrement(ctx, req)
	switch {
	case err == nil:
		if sale.LedgerErr == nil {
			s.endAttempt(ctx, rec)
		}
		return sale, false, nil
	case errors.Is(err, ErrOutcomeUnknown):
		// The stock may be taken; the attempt must stay, so that a retry
		// finds the sale (pending or recorded) or, if there is none,
		// recovery frees the key once the write can no longer land.
		return Sale{}, false, err
	}
	// Nothing was changed: free the key for a retry.
	s.freeKey(ctx, rec, true)
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

// beginAttempt records rec's attempt, before its reservation is written:
// from then until it is settled, recovery can find it, whatever happens to
// this replica. If the insert landed despite an error, recovery finds no
// key reserved for it and deletes it.
func (s *Store) beginAttempt(ctx context.Context, rec keyRecord) error {
	cctx, cancel := s.commitContext(ctx)
	defer cancel()
	if _, err := s.attempts.InsertOne(cctx, attempt{OrderID: rec.OrderID, KeyID: rec.ID, At: rec.At}); err != nil {
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
// With owned, the caller knows the reservation landed. While rec's attempt
// exists nobody else replaces, frees or expires the key, so the key is
// marked free by _id alone, and the attempt is ended only after that: if
// either write fails, the attempt stays and recovery frees the key later.
// An attempt already gone was settled by recovery (the decrement outlived
// AbandonAfter), which freed the key itself; it is left alone.
//
// Without owned, the caller does not know whether its reservation landed:
// it deletes the key only if it is still rec's, and leaves the attempt to
// recovery, which frees the key if the reservation lands after all.
//
// It reports whether this call freed the key.
func (s *Store) freeKey(ctx context.Context, rec keyRecord, owned bool) bool {
	cctx, cancel := s.commitContext(ctx)
	defer cancel()
	var err error
	if owned {
		err = s.attempts.FindOne(cctx, bson.D{{Key: "_id", Value: rec.OrderID}}).Err()
		if errors.Is(err, mongo.ErrNoDocuments) {
			return false
		}
		if err == nil {
			_, err = s.keys.UpdateOne(cctx, bson.D{{Key: "_id", Value: rec.ID}},
				bson.D{{Key: "$set", Value: bson.D{{Key: "freed", Value: rec.OrderID}}}})
		}
		if err == nil {
			s.endAttempt(ctx, rec)
		}
	} else {
		var res *mongo.DeleteResult
		res, err = s.keys.DeleteOne(cctx, bson.D{{Key: "_id", Value: rec.ID}, {Key: "order_id", Value: rec.OrderID}})
		if err == nil && res.DeletedCount == 0 {
			return false
		}
	}
	if err != nil {
		s.logger.WarnContext(ctx, "could not free the idempotency key of a failed decrement; retries with it answer in progress until recovery frees it",
			slog.String("sku", rec.SKU), slog.String("order_id", rec.OrderID), slog.Any("error", err))
		return false
	}
	return true
}

// KeyRecovery counts what RecoverKeys did.
type KeyRecovery struct {
	Expired   int // keys older than the retention, forgotten
	Settled   int // attempts whose sale was found, ended
	Abandoned int // attempts with no sale whose keys this pass freed
}

// expireBatch bounds the keys one RecoverKeys looks at for expiry.
const expireBatch = 100

// RecoverKeys settles the attempts older than AbandonAfter that nobody
// ended: an attempt whose sale happened is ended; one with no sale, in the
// ledger or pending, frees its key, so that the key may be used again. It
// reads only the attempts collection, which holds just the attempts in
// flight and those whose replica died, never the retained keys.
//
// Where the server has no TTL index it also forgets keys older than the
// retention: at most expireBatch a pass, from the oldest stored. Running
// it on several replicas at once is safe.
func (s *Store) RecoverKeys(ctx context.Context) (KeyRecovery, error) {
	var r KeyRecovery
	now := time.Now()
	cur, err := s.attempts.Find(ctx, bson.D{})
	if err != nil {
		return r, fmt.Errorf("inventory: find idempotency attempts: %w", err)
	}
	var atts []attempt
	if err := cur.All(ctx, &atts); err != nil {
		return r, fmt.Errorf("inventory: find idempotency attempts: %w", err)
	}
	for _, a := range atts {
		if !a.At.Before(now.Add(-s.abandonAfter)) {
			continue
		}
		var rec keyRecord
		err := s.keys.FindOne(ctx, bson.D{{Key: "_id", Value: a.KeyID}}).Decode(&rec)
		if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
			return r, fmt.Errorf("inventory: read idempotency key %q: %w", a.KeyID, err)
		}
		if err != nil || rec.OrderID != a.OrderID || rec.free() {
			// Its reservation never landed, or was freed: nothing to
			// settle but the attempt itself.
			s.endAttempt(ctx, keyRecord{SKU: rec.SKU, OrderID: a.OrderID})
			continue
		}
		_, found, err := s.outcome(ctx, rec)
		if err != nil {
			return r, err
		}
		if found {
			if s.endAttempt(ctx, rec) {
				r.Settled++
			}
			continue
		}
		if s.freeKey(ctx, rec, true) {
			r.Abandoned++
		}
	}
	if s.ttl.Load() {
		return r, nil
	}
	n, err := s.expireKeys(ctx, now)
	r.Expired = n
	return r, err
}

// expireKeys forgets the keys past the retention among the first
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
	cur, err := s.keys.Find(ctx, bson.D{}, options.Find().SetLimit(expireBatch))
	if err != nil {
		return 0, fmt.Errorf("inventory: read the oldest idempotency keys: %w", err)
	}
	var recs []keyRecord
	if err := cur.All(ctx, &recs); err != nil {
		return 0, fmt.Errorf("inventory: read the oldest idempotency keys: %w", err)
	}
	n := 0
	for _, rec := range recs {
		if !rec.At.Before(now.Add(-s.keyRetention)) {
			continue
		}
		err := s.attempts.FindOne(ctx, bson.D{{Key: "_id", Value: rec.OrderID}}).Err()
		if err == nil {
			continue
		}
		if !errors.Is(err, mongo.ErrNoDocuments) {
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
