package mongostore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// HoldsCollection keeps the settled holds (see holdRecord).
const HoldsCollection = "holds"

// Holds (docs/holds.md).
//
// A hold takes units out of the item's stock into its held count, and
// records itself in the item, in one conditional update:
//
//	filter: {_id: sku, stock: {$gte: qty}, holds.<id>: {$exists: false}, <not aborted>}
//	update: {$inc: {stock: -qty, held: qty, version: 1}, $set: {holds.<id>: {qty, expires, state: "held", ...}}}
//
// Since held units are not in stock, no sale of any strategy can take
// them: every strategy's condition is on stock. stock + held + the units
// of the sku's orders is the same at every read.
//
// # The clock rule
//
// A hold's created and expires are on the store's clock: created is an
// upper estimate of it (storeTime), expires is created plus the time to
// live, so the buyer gets at least the time to live by the store's clock.
// Two decisions compare that clock with expires, and each takes the bound
// that is safe for it:
//
//   - A confirm is decided by the store's own clock at the moment its
//     first write applies: the write sets a field of the item with
//     $currentDate and reads it back, and the confirm stands only if that
//     time is before expires. No replica clock, no estimate, no window
//     between a check and a write: a confirm paused for an hour, from a
//     replica whose clock is off by a day, reads the time it landed, and
//     is late.
//   - A sale takes a hold's units only when a lower estimate of the
//     store's clock is at or past expires: the store's clock has then
//     certainly passed it, so no confirm's first write can land in time
//     any more. It does so in the conditional update that sells, which
//     requires the hold still held and untouched by a confirm since the
//     sale read it, so a confirm and the sale are decided by one
//     document: whichever lands first wins, and a confirm that lands
//     second finds the hold expired.
//
// A hold whose expiry lies between the two estimates is neither sold nor
// confirmable by a decision that could be wrong: the sale waits (at most
// the estimate's width, a round trip), the confirm lands and is judged by
// the store's clock. Nothing sweeps holds for correctness: RecoverHolds
// only records settled holds in the holds collection and returns expired
// units early, and its expiry decision is the sale's.
//
// # A confirm in two writes
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

// holdPath is the item field of hold id, or of one of its fields.
func holdPath(id string, field ...string) string {
	p := "holds." + id
	for _, f := range field {
		p += "." + f
	}
	return p
}

// holdRecord is a settled hold in the holds collection:
//
//	{_id: hold id, sku, qty, strategy, replica, created, expires, state, confirmed_at, key, fence}
//
// A hold is recorded there before its entry leaves the item, so a hold
// that existed is found in one place or the other, read in that order.
type holdRecord struct {
	ID             string `bson:"_id"`
	inventory.Hold `bson:",inline"`
}

// expiredHolds returns the holds of it stored as held that are expired
// at lower, a lower estimate of the store's clock (see Hold.Settled):
// their expiry has passed on the store's clock, or a confirm reached them
// late. It returns their units too.
func expiredHolds(it itemDoc, lower time.Time) (ids []string, units int64) {
	for id, h := range it.Holds {
		if h.State == inventory.HoldHeld && h.Settled(lower) == inventory.HoldExpired {
			ids = append(ids, id)
			units += h.Qty
		}
	}
	slices.Sort(ids)
	return ids, units
}

// holdConds are the conditions of a write that returns the units of holds
// ids as it read them: each still held, its expiry unchanged, and no
// confirm's first write landed on it since the read (confirming as read).
// With them, a confirm and the return are decided by one document.
func holdConds(it itemDoc, ids []string) bson.D {
	var d bson.D
	for _, id := range ids {
		h := it.Holds[id]
		d = append(d,
			bson.E{Key: holdPath(id, "state"), Value: inventory.HoldHeld},
			bson.E{Key: holdPath(id, "expires"), Value: h.Expires})
		if h.Confirming == "" {
			d = append(d, bson.E{Key: holdPath(id, "confirming"), Value: bson.D{{Key: "$exists", Value: false}}})
		} else {
			d = append(d, bson.E{Key: holdPath(id, "confirming"), Value: h.Confirming})
		}
	}
	return d
}

// expiredUnits is what expiredHolds counts in it now, by the store's clock;
// 0 when the clock cannot be read (a sale then finds the stock short).
func (s *Store) expiredUnits(ctx context.Context, it itemDoc) int64 {
	if len(it.Holds) == 0 {
		return 0
	}
	lower, err := s.storeTime(ctx, false)
	if err != nil {
		return 0
	}
	_, units := expiredHolds(it, lower)
	return units
}

// newHold returns the hold req asks for, stamped by the store's clock.
func (s *Store) newHold(ctx context.Context, req inventory.HoldRequest, strategy string, fence int64) (inventory.Hold, error) {
	created, err := s.storeTime(ctx, true)
	if err != nil {
		return inventory.Hold{}, unreachable("read the store's clock to hold", req.SKU, err)
	}
	id := req.ID
	if id == "" {
		id = newOrderID()
	}
	return inventory.Hold{
		ID: id, SKU: req.SKU, Qty: req.Qty, Strategy: strategy, Replica: s.replica,
		Created: created, Expires: created.Add(req.TTL), State: inventory.HoldHeld, Key: req.Key, Fence: fence,
	}, nil
}

// holdShort is the error of a hold of qty units of sku that found the
// item's own stock short (short, a sold out): ErrHoldsUnsupported when
// the buckets strategy has split the item and its buckets cover qty (a
// hold takes from the item's own stock only, which a split leaves at 0,
// so "sold out" would be false), short otherwise. It is nil when the item
// is not split and its own stock covers qty at this read: the item changed
// since the caller read it (a merge of its buckets, a restock), and the
// caller takes again.
func (s *Store) holdShort(ctx context.Context, sku string, qty int64, short error) error {
	v, err := s.read(ctx, s.items, sku)
	if err == nil && v.item.Split == nil && v.item.Stock >= qty {
		return nil
	}
	if err != nil || v.item.Split == nil || v.total() < qty {
		return short
	}
	return fmt.Errorf("%w: %q: its stock is split across the buckets strategy's documents, and a hold takes from the item's own stock only", inventory.ErrHoldsUnsupported, sku)
}

// CreateHold takes req.Qty units of req.SKU into a new hold that expires
// req.TTL from now by the store's clock, as the lock-free strategy does:
// one conditional update (see Holds above). It answers ErrSoldOut when the
// stock, with the units of expired holds, is short; ErrInvalid for a bad
// request, before any I/O.
func (s *Store) CreateHold(ctx context.Context, req inventory.HoldRequest, strategy string) (inventory.Hold, error) {
	return s.createHold(ctx, req, strategy, 0, nil, nil)
}

// createHold is CreateHold under a lock strategy's conds, from the item it
// read under its lock.
func (s *Store) createHold(ctx context.Context, req inventory.HoldRequest, strategy string, fence int64, conds []cond, read *itemDoc) (inventory.Hold, error) {
	if err := req.Validate(); err != nil {
		return inventory.Hold{}, err
	}
	h, err := s.newHold(ctx, req, strategy, fence)
	if err != nil {
		return inventory.Hold{}, err
	}
	var it itemDoc
	for attempt := 0; ; attempt++ {
		it, err = s.sell(ctx, sale{op: "hold", sku: h.SKU, hold: &h, qty: h.Qty, conds: conds, read: read})
		if errors.Is(err, errHoldExists) {
			return s.GetHold(ctx, req.SKU, h.ID)
		}
		if !errors.Is(err, inventory.ErrSoldOut) {
			break
		}
		if err := s.holdShort(ctx, req.SKU, req.Qty, err); err != nil {
			return inventory.Hold{}, err
		}
		// The item holds enough now. A caller's read (under its lock)
		// is out of date: it reads again; else take again.
		if read != nil || attempt+1 == takeAttempts {
			return inventory.Hold{}, fmt.Errorf("%w: hold %d of %q: the item kept changing", inventory.ErrConflict, req.Qty, req.SKU)
		}
	}
	if err != nil {
		return inventory.Hold{}, err
	}
	s.withHolds.add(h.SKU)
	got := it.Holds[h.ID]
	got.ID = h.ID
	return got, nil
}

// HoldOnce is a create of hold with an idempotency key (req.Key): the
// first call holds, a later one with the same key and request answers
// the same hold (replayed), whatever became of it since, and one with
// another request ErrKeyReused. It is DecrementOnce's reservation, with
// the hold's id as the order id: a retry finds the hold in the item, in
// the holds collection, or, confirmed, in the ledger.
func (s *Store) HoldOnce(ctx context.Context, h inventory.Holder, req inventory.HoldRequest, match string) (inventory.Hold, bool, error) {
	if err := req.Validate(); err != nil {
		return inventory.Hold{}, false, err
	}
	sale, replayed, err := s.DecrementOnce(ctx, holdTaker{h: h, ttl: req.TTL},
		inventory.Request{SKU: req.SKU, Qty: req.Qty, Key: req.Key}, fmt.Sprintf("hold %s %d", match, req.TTL.Milliseconds()))
	if err != nil {
		return inventory.Hold{}, false, err
	}
	hold, err := s.GetHold(ctx, req.SKU, sale.OrderID)
	return hold, replayed, err
}

// holdTaker makes a Holder's create a Strategy for DecrementOnce.
type holdTaker struct {
	h   inventory.Holder
	ttl time.Duration
}

func (t holdTaker) Name() string { return t.h.Name() }

func (t holdTaker) Decrement(ctx context.Context, req inventory.Request) (inventory.Sale, error) {
	h, err := t.h.Hold(ctx, inventory.HoldRequest{SKU: req.SKU, Qty: req.Qty, TTL: t.ttl, ID: req.OrderID, Key: req.Key})
	if err != nil {
		return inventory.Sale{}, err
	}
	return inventory.Sale{OrderID: h.ID, SKU: h.SKU, Qty: h.Qty, Strategy: h.Strategy, Replica: h.Replica, At: h.Created, Key: h.Key, Remaining: -1, Attempts: 1}, nil
}

// Hold implements inventory.Holder for the lock-free strategy.
func (a *Atomic) Hold(ctx context.Context, req inventory.HoldRequest) (inventory.Hold, error) {
	return a.store.CreateHold(ctx, req, a.Name())
}

// holdRecorded returns the settled hold id of sku from the holds
// collection, or ErrHoldNotFound.
func (s *Store) holdRecorded(ctx context.Context, sku, id string) (inventory.Hold, error) {
	var r holdRecord
	err := s.holds.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&r)
	if errors.Is(err, mongo.ErrNoDocuments) || (err == nil && r.SKU != sku) {
		return inventory.Hold{}, fmt.Errorf("%w: hold %s of %q", inventory.ErrHoldNotFound, id, sku)
	}
	if err != nil {
		return inventory.Hold{}, unreachable("read hold "+id+" of", sku, err)
	}
	r.Hold.ID = r.ID
	return r.Hold, nil
}

// findHold reads hold id of sku: in the item (found true, with the item),
// else in the holds collection, else ErrHoldNotFound (or the item's
// ErrNotFound).
func (s *Store) findHold(ctx context.Context, sku, id string) (inventory.Hold, *itemDoc, error) {
	if err := checkHold(sku, id); err != nil {
		return inventory.Hold{}, nil, err
	}
	it, err := s.getDoc(ctx, s.items, sku)
	if err != nil {
		return inventory.Hold{}, nil, err
	}
	if h, ok := it.Holds[id]; ok {
		h.ID = id
		return h, &it, nil
	}
	h, err := s.holdRecorded(ctx, sku, id)
	return h, nil, err
}

// checkHold returns ErrInvalid, saying why, unless sku and id are valid.
func checkHold(sku, id string) error {
	if err := inventory.CheckSKU(sku); err != nil {
		return err
	}
	if !inventory.HoldID(id) {
		return fmt.Errorf("%w: hold id %q must be 1 to 64 of [A-Za-z0-9_-]", inventory.ErrInvalid, id)
	}
	return nil
}

// GetHold returns hold id of sku, its State settled by the store's clock
// (see Hold.Settled): a hold stored as held whose expiry the store's clock
// had certainly passed when it was read, with no confirm stamped on it,
// reads as expired; one confirmed in time as confirmed.
//
// A hold stored as held that a confirm has stamped reads as held, past its
// expiry too: whether that stamp was in time is not in the item (the
// stamp is the item's confirm_clock, which the next confirm overwrites),
// and one in time may still sell with its second write, until a sale or a
// release takes the units back. "Expired" is never a hold that can still
// be confirmed.
func (s *Store) GetHold(ctx context.Context, sku, id string) (inventory.Hold, error) {
	if err := checkHold(sku, id); err != nil {
		return inventory.Hold{}, err
	}
	// The clock before the hold: lower is then no later than the store's
	// clock at the read, so a hold past its expiry at lower had expired
	// when it was read, and a confirm that stamps it after the read is
	// late.
	lower, err := s.storeTime(ctx, false)
	if err != nil {
		return inventory.Hold{}, unreachable("read the store's clock for hold "+id+" of", sku, err)
	}
	h, _, err := s.findHold(ctx, sku, id)
	if err != nil {
		return inventory.Hold{}, err
	}
	if h.State == inventory.HoldHeld && h.Confirming == "" {
		h.State = h.Settled(lower)
	}
	return h, nil
}

// holdErr is the error of a hold found in state st where a confirm or a
// release wanted it held.
func holdErr(h inventory.Hold, st string) error {
	switch st {
	case inventory.HoldExpired:
		return fmt.Errorf("%w: hold %s of %q expired at %s (store clock)", inventory.ErrHoldExpired, h.ID, h.SKU, h.Expires.Format(time.RFC3339Nano))
	case inventory.HoldReleased:
		return fmt.Errorf("%w: hold %s of %q", inventory.ErrHoldReleased, h.ID, h.SKU)
	}
	return fmt.Errorf("%w: hold %s of %q", inventory.ErrHoldConfirmed, h.ID, h.SKU)
}

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
			one := *it // this hold alone: another's change must not undo the return
			one.Holds = map[string]inventory.Hold{id: it.Holds[id]}
			n, err := s.returnHoldsAt(ctx, one, lower)
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
		var stamped struct {
			Clock time.Time                 `bson:"confirm_clock"`
			Holds map[string]inventory.Hold `bson:"holds"`
		}
		err = s.items.FindOneAndUpdate(cctx,
			confirmFilter(sku, h),
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
		if !stamped.Clock.Before(stamped.Holds[id].Expires) {
			s.returnLate(ctx, sku, h, nonce)
			return inventory.Sale{}, false, fmt.Errorf("%w: the confirm reached the store at %s", holdErr(h, inventory.HoldExpired), stamped.Clock.Format(time.RFC3339Nano))
		}
		if s.betweenConfirmWrites != nil {
			s.betweenConfirmWrites()
		}
		// The second write: the units sold, the order pending.
		at := stamped.Clock.UTC()
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
			bson.D{{Key: "_id", Value: sku}, {Key: holdPath(id, "state"), Value: inventory.HoldHeld}, {Key: holdPath(id, "confirming"), Value: nonce}},
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
	cctx, cancel := s.commitContext(ctx)
	defer cancel()
	res, err := s.items.UpdateOne(cctx,
		bson.D{{Key: "_id", Value: sku}, {Key: holdPath(h.ID, "state"), Value: inventory.HoldHeld}, {Key: holdPath(h.ID, "confirming"), Value: nonce}},
		bson.D{
			{Key: "$inc", Value: bson.D{{Key: "stock", Value: h.Qty}, {Key: "held", Value: -h.Qty}, {Key: "version", Value: int64(1)}}},
			{Key: "$set", Value: bson.D{{Key: holdPath(h.ID, "state"), Value: inventory.HoldExpired}}},
		})
	if err != nil {
		s.logger.DebugContext(ctx, "could not return the units of a hold confirmed late; the next sale or recovery will",
			slog.String("hold_id", h.ID), slog.String("sku", sku), slog.Any("error", err))
		return
	}
	if res.MatchedCount == 1 {
		h.State, h.Confirming = inventory.HoldExpired, nonce
		s.recordHold(cctx, h)
	}
}

// confirmFilter is the condition of a confirm's first write on hold h as
// read: still held, and no other confirm's first write since.
func confirmFilter(sku string, h inventory.Hold) bson.D {
	d := bson.D{{Key: "_id", Value: sku}, {Key: holdPath(h.ID, "state"), Value: inventory.HoldHeld}}
	if h.Confirming == "" {
		return append(d, bson.E{Key: holdPath(h.ID, "confirming"), Value: bson.D{{Key: "$exists", Value: false}}})
	}
	return append(d, bson.E{Key: holdPath(h.ID, "confirming"), Value: h.Confirming})
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

// ReleaseHold gives the units of hold id of sku back to the stock. A hold
// already released, or expired, is answered as it is (its units are, or
// can be, sold again). A hold confirmed is refused with ErrHoldConfirmed.
func (s *Store) ReleaseHold(ctx context.Context, sku, id string) (inventory.Hold, error) {
	for attempt := 0; attempt < confirmAttempts; attempt++ {
		h, it, err := s.findHold(ctx, sku, id)
		if err != nil {
			return inventory.Hold{}, err
		}
		if it == nil || h.State != inventory.HoldHeld {
			if h.State == inventory.HoldConfirmed {
				return h, holdErr(h, h.State)
			}
			return h, nil
		}
		lower, err := s.storeTime(ctx, false)
		if err != nil {
			return inventory.Hold{}, unreachable("read the store's clock to release hold "+id+" of", sku, err)
		}
		state := inventory.HoldReleased
		if h.Settled(lower) == inventory.HoldExpired {
			state = inventory.HoldExpired
		}
		cctx, cancel := s.commitContext(ctx)
		res, err := s.items.UpdateOne(cctx,
			append(bson.D{{Key: "_id", Value: sku}}, holdConds(*it, []string{id})...),
			bson.D{
				{Key: "$inc", Value: bson.D{{Key: "stock", Value: h.Qty}, {Key: "held", Value: -h.Qty}, {Key: "version", Value: int64(1)}}},
				{Key: "$set", Value: bson.D{{Key: holdPath(id, "state"), Value: state}}},
			})
		if err != nil {
			cancel()
			return inventory.Hold{}, unknownOutcome("release hold "+id+" of", sku, err)
		}
		if res.MatchedCount == 1 {
			h.State = state
			s.recordHold(cctx, h)
			cancel()
			return h, nil
		}
		cancel()
	}
	return inventory.Hold{}, fmt.Errorf("%w: release hold %s of %q: it kept changing", inventory.ErrConflict, id, sku)
}

// returnHolds returns the units of it's expired holds, as read in it, in
// one update conditional on each of them unchanged, and records them.
func (s *Store) returnHolds(ctx context.Context, it itemDoc) (int64, error) {
	lower, err := s.storeTime(ctx, false)
	if err != nil {
		return 0, unreachable("read the store's clock to return the expired holds of", it.SKU, err)
	}
	return s.returnHoldsAt(ctx, it, lower)
}

// returnHoldsAt is returnHolds with lower, a lower estimate of the store's
// clock, deciding which holds have expired. It returns 0 when it returned
// nothing: none expired, or the item changed since it was read.
func (s *Store) returnHoldsAt(ctx context.Context, it itemDoc, lower time.Time) (int64, error) {
	ids, units := expiredHolds(it, lower)
	if len(ids) == 0 {
		return 0, nil
	}
	set := bson.D{}
	for _, id := range ids {
		set = append(set, bson.E{Key: holdPath(id, "state"), Value: inventory.HoldExpired})
	}
	cctx, cancel := s.commitContext(ctx)
	defer cancel()
	res, err := s.items.UpdateOne(cctx, append(bson.D{{Key: "_id", Value: it.SKU}}, holdConds(it, ids)...),
		bson.D{
			{Key: "$inc", Value: bson.D{{Key: "stock", Value: units}, {Key: "held", Value: -units}, {Key: "version", Value: int64(1)}}},
			{Key: "$set", Value: set},
		})
	if err != nil {
		return 0, unknownOutcome("return the expired holds of", it.SKU, err)
	}
	if res.MatchedCount == 0 {
		return 0, nil // changed since the read: whoever changed it decided
	}
	for _, id := range ids {
		h := it.Holds[id]
		h.ID, h.State = id, inventory.HoldExpired
		s.recordHold(cctx, h)
	}
	return units, nil
}

// ReturnExpiredHolds returns to sku's stock the units of its holds that
// have expired by the store's clock, and reports how many. A sale of a
// strategy that takes no part in holds calls it when it finds the stock
// short, then sells again; no one needs to call it for a hold-aware sale,
// which returns them in its own update.
//
// So that a sold out costs no extra read where there are no holds, it
// looks only at a sku this store has seen holds on: one it created a
// hold on, or found with holds in a RecoverHolds pass. A hold created by
// another replica on a sku this one has not seen yet is returned by the
// next RecoverHolds pass instead, at most a recovery interval later.
func (s *Store) ReturnExpiredHolds(ctx context.Context, sku string) (int64, error) {
	if !s.withHolds.has(sku) {
		return 0, nil
	}
	it, err := s.getDoc(ctx, s.items, sku)
	if err != nil {
		return 0, err
	}
	return s.returnHolds(ctx, it)
}

// returning is a strategy that takes no part in holds (not a Holder),
// made to sell the units of holds expired by the store's clock: when it
// answers sold out and the item has such holds, ReturnExpiredHolds
// returns their units to the stock and it sells once more. Without it
// such a strategy answers sold out until recovery returns them.
type returning struct {
	inventory.Strategy
	store *Store
}

// Decrement implements inventory.Strategy.
func (r returning) Decrement(ctx context.Context, req inventory.Request) (inventory.Sale, error) {
	sale, err := r.Strategy.Decrement(ctx, req)
	if !errors.Is(err, inventory.ErrSoldOut) {
		return sale, err
	}
	if n, rerr := r.store.ReturnExpiredHolds(ctx, req.SKU); rerr != nil || n == 0 {
		return sale, err
	}
	return r.Strategy.Decrement(ctx, req)
}

// RecoverHolds tidies the holds of every item that has any: it finishes
// the confirms stamped in time (their order to the ledger), returns the
// units of expired holds, and records settled holds in the holds
// collection. It decides nothing that a sale or a confirm would not
// decide the same way; the holds are correct without it. It reports how
// many holds it settled or recorded.
func (s *Store) RecoverHolds(ctx context.Context) (int, error) {
	ctx, cancel := s.passContext(ctx)
	defer cancel()
	cur, err := s.items.Find(ctx, bson.D{{Key: "holds", Value: bson.D{
		{Key: "$exists", Value: true}, {Key: "$ne", Value: bson.D{}},
	}}})
	if err != nil {
		return 0, fmt.Errorf("inventory: find holds: %w", err)
	}
	var items []itemDoc
	if err := cur.All(ctx, &items); err != nil {
		return 0, fmt.Errorf("inventory: find holds: %w", err)
	}
	n := 0
	var errs []error
	for _, it := range items {
		s.withHolds.add(it.SKU)
		if units, err := s.returnHolds(ctx, it); err != nil {
			errs = append(errs, err)
		} else if units > 0 {
			n++
			continue // its holds changed: the next pass records them
		}
		for id, h := range it.Holds {
			h.ID = id
			switch h.State {
			case inventory.HoldConfirmed:
				if _, err := s.finishConfirm(ctx, h); err != nil {
					errs = append(errs, err)
				}
				n++
			case inventory.HoldReleased, inventory.HoldExpired:
				s.recordHold(ctx, h)
				n++
			}
		}
	}
	return n, errors.Join(errs...)
}

// heldSale is the outcome of a key whose attempt created a hold: the hold
// id as the order id (HoldOnce reads the hold by it).
func heldSale(rec keyRecord) inventory.Sale {
	return inventory.Sale{OrderID: rec.OrderID, SKU: rec.SKU, Remaining: -1, Attempts: 1, Key: rec.Key}
}

// has reports whether sku is in the set.
func (s *skuSet) has(sku string) bool {
	_, ok := s.m.Load(sku)
	return ok
}
