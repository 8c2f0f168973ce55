package mongostore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// A confirm in two writes (docs/holds.md).
//
// FerretDB v1 sets $currentDate on top-level fields only, so a confirm
// takes two writes (see ConfirmHold). The first sets confirm_clock and
// marks the hold with the confirm's nonce; it sells nothing. In time, the
// second, conditional on the hold still held with that nonce, moves its
// units out of held and records its order as pending in one update; then
// the order goes to the ledger like every sale's. A sale that returns an
// expired hold's units in between makes the second write match nothing:
// the confirm is refused, having sold nothing. Only the first write's
// time decides whether a confirm may stand, and only one document decides
// whether it does.

// confirmAttempts bounds the reads and writes of one confirm whose hold
// keeps changing under it.
const confirmAttempts = 4

// confirmClock is the item field a confirm's first write sets to the
// store's clock ($currentDate): FerretDB v1 sets it only on a top-level
// field, so the write reads it back and the second write copies it into
// the hold.
const confirmClock = "confirm_clock"

// ConfirmHold sells the units of hold id of sku: one order in the ledger,
// whose id is the hold's. It is idempotent: a confirm of a hold already
// confirmed answers its order, with replayed true. A hold whose expiry
// the store's clock passed before the confirm's first write reached it, or
// whose units went back to the stock before its second, is refused with
// ErrHoldExpired (one released, ErrHoldReleased), and nothing is sold.
// key, when not empty, is recorded in the order.
//
// The two writes: the first, conditional on the hold held and untouched
// since the read, stamps the store's clock and marks the hold with this
// confirm's nonce; the stamp decides. In time, the second, conditional on
// the hold still held with that nonce, moves its units out of held and
// records the order as pending, in one update. A sale may take the units
// of an expired hold between the two (only once the store's clock has
// passed the expiry), and then the second write matches nothing.
func (s *Store) ConfirmHold(ctx context.Context, sku, id, key string) (sale inventory.Sale, replayed bool, err error) {
	if key != "" && !inventory.ValidKey(key) {
		return inventory.Sale{}, false, fmt.Errorf("%w: idempotency key must be 1 to %d printable ASCII characters", inventory.ErrInvalid, inventory.MaxKeyLen)
	}
	for attempt := 0; attempt < confirmAttempts; attempt++ {
		h, it, err := s.findHold(ctx, sku, id)
		if err != nil {
			return inventory.Sale{}, false, err
		}
		if s.afterConfirmRead != nil {
			s.afterConfirmRead()
		}
		if it == nil {
			// Settled and recorded.
			if h.State != inventory.HoldConfirmed {
				return inventory.Sale{}, false, holdErr(h, h.State)
			}
			o, err := s.order(ctx, sku, id)
			if err != nil {
				return inventory.Sale{}, false, err
			}
			return o.Sale(), true, nil
		}
		switch h.State {
		case inventory.HoldConfirmed:
			sale, err := s.finishConfirm(ctx, h)
			return sale, true, err
		case inventory.HoldReleased, inventory.HoldExpired:
			return inventory.Sale{}, false, holdErr(h, h.State)
		}
		lower, err := s.storeTime(ctx, false)
		if err != nil {
			return inventory.Sale{}, false, unreachable("read the store's clock to confirm hold "+id+" of", sku, err)
		}
		if h.Settled(lower) == inventory.HoldExpired {
			// Certainly past its expiry on the store's clock: no first
			// write can stamp it in time any more. But one may have done
			// so already (this request's earlier attempt, paused), and its
			// second write may still land: the refusal says "nothing was
			// sold", so it stands only once the units are back, by a
			// write conditional on the hold as read. A write that matches
			// nothing means the hold changed: look again (it may be
			// confirmed, and then this answers its order).
			// This hold alone: another's change must not undo the return.
			n, err := s.returnExpired(ctx, *it, []string{id}, h.Qty)
			if err != nil {
				return inventory.Sale{}, false, err
			}
			if n > 0 {
				return inventory.Sale{}, false, holdErr(h, inventory.HoldExpired)
			}
			continue
		}
		if s.beforeStamp != nil {
			s.beforeStamp()
		}
		// The first write: the store's clock, as the write applies, decides.
		nonce := newOrderID()
		cctx, cancel := s.commitContext(ctx)
		var stamped itemDoc
		err = s.items.FindOneAndUpdate(cctx,
			append(bson.D{{Key: "_id", Value: sku}}, heldAsRead(id, h.Confirming)...),
			bson.D{
				{Key: "$currentDate", Value: bson.D{{Key: confirmClock, Value: true}}},
				{Key: "$set", Value: bson.D{{Key: holdPath(id, "confirming"), Value: nonce}}},
			},
			options.FindOneAndUpdate().SetReturnDocument(options.After),
		).Decode(&stamped)
		cancel()
		if errors.Is(err, mongo.ErrNoDocuments) {
			continue // changed since the read (returned, released, another confirm): look again
		}
		if err != nil {
			// The first write sells nothing, landed or not.
			return inventory.Sale{}, false, fmt.Errorf("%w: confirm hold %s of %q: %w", inventory.ErrStoreUnavailable, id, sku, err)
		}
		// Both times as the document holds them at the write.
		if !stamped.ConfirmClock.Before(stamped.Holds[id].Expires) {
			s.returnLate(ctx, sku, h, nonce)
			return inventory.Sale{}, false, fmt.Errorf("%w: the confirm reached the store at %s", holdErr(h, inventory.HoldExpired), stamped.ConfirmClock.Format(time.RFC3339Nano))
		}
		if s.betweenConfirmWrites != nil {
			s.betweenConfirmWrites()
		}
		// The second write: the units sold, the order pending.
		at := stamped.ConfirmClock.UTC()
		h.State, h.ConfirmedAt, h.ConfirmReplica, h.ConfirmKey, h.Confirming = inventory.HoldConfirmed, &at, s.replica, key, nonce
		o := h.Order()
		set := bson.D{
			{Key: holdPath(id, "state"), Value: inventory.HoldConfirmed},
			{Key: holdPath(id, "confirmed_at"), Value: at},
			{Key: holdPath(id, "confirm_replica"), Value: s.replica},
			{Key: pendingPath(id), Value: o},
		}
		if key != "" {
			set = append(set, bson.E{Key: holdPath(id, "confirm_key"), Value: key})
		}
		cctx, cancel = s.commitContext(ctx)
		res, err := s.items.UpdateOne(cctx,
			append(bson.D{{Key: "_id", Value: sku}}, heldAsRead(id, nonce)...),
			bson.D{{Key: "$inc", Value: bson.D{{Key: "held", Value: -h.Qty}}}, {Key: "$set", Value: set}})
		cancel()
		if err != nil {
			return inventory.Sale{}, false, unknownOutcome("confirm hold "+id+" of", sku, err)
		}
		if res.MatchedCount == 0 {
			continue // its units went back, or another confirm came between: look again
		}
		sale, err := s.finishConfirm(ctx, h)
		return sale, false, err
	}
	return inventory.Sale{}, false, fmt.Errorf("%w: confirm hold %s of %q: it kept changing", inventory.ErrConflict, id, sku)
}

// returnLate returns the units of hold h of sku, which the first write of
// a confirm with nonce stamped at or after its expiry by the store's own
// clock, conditional on that stamp still the hold's last: then no confirm
// can sell it any more (the stamp fenced out every earlier confirm's second
// write, and a later stamp is later), so a read of it says expired from
// now on. Quietly: the confirm has its answer; the next sale or recovery
// returns the units otherwise.
func (s *Store) returnLate(ctx context.Context, sku string, h inventory.Hold, nonce string) {
	h.State, h.Confirming = inventory.HoldExpired, nonce
	if _, err := s.unhold(ctx, heldAsRead(h.ID, nonce), h); err != nil {
		s.logger.DebugContext(ctx, "could not return the units of a hold confirmed late; the next sale or recovery will",
			slog.String("hold_id", h.ID), slog.String("sku", sku), slog.Any("error", err))
	}
}

// finishConfirm records the order of hold h, confirmed, in the ledger, and
// the hold in the holds collection. Any replica may do it, any number of
// times: each step is idempotent.
func (s *Store) finishConfirm(ctx context.Context, h inventory.Hold) (inventory.Sale, error) {
	o := h.Order()
	cctx, cancel := s.commitContext(ctx)
	defer cancel()
	sale := o.Sale()
	if err := s.record(cctx, o); err != nil {
		sale.LedgerErr = fmt.Errorf("inventory: record order %s of %q: %w", o.ID, o.SKU, err)
		return sale, nil
	}
	s.recordHold(cctx, h)
	return sale, nil
}

// recordHold moves settled hold h from the item to the holds collection:
// insert (or replace) its record, then remove its entry, if it is still
// in h's state. Both steps are idempotent; a failure leaves the entry for
// RecoverHolds.
func (s *Store) recordHold(ctx context.Context, h inventory.Hold) {
	_, err := s.holds.ReplaceOne(ctx, bson.D{{Key: "_id", Value: h.ID}}, holdRecord{ID: h.ID, Hold: h}, options.Replace().SetUpsert(true))
	if err == nil {
		_, err = s.items.UpdateOne(ctx,
			bson.D{{Key: "_id", Value: h.SKU}, {Key: holdPath(h.ID, "state"), Value: h.State}},
			bson.D{{Key: "$unset", Value: bson.D{{Key: holdPath(h.ID), Value: ""}}}})
	}
	if err != nil {
		s.logger.WarnContext(ctx, "could not record a settled hold; recovery will",
			slog.String("hold_id", h.ID), slog.String("sku", h.SKU), slog.Any("error", err))
	}
}
