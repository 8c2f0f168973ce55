package mongostore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
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
// A confirm is in confirm.go.

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
		d = append(d, heldAsRead(id, it.Holds[id].Confirming)...)
		d = append(d, bson.E{Key: holdPath(id, "expires"), Value: it.Holds[id].Expires})
	}
	return d
}

// heldAsRead is the condition that hold id is still held, with the mark of
// the confirm of nonce, or with none for an empty nonce: no other
// confirm's first write since.
func heldAsRead(id, nonce string) bson.D {
	var mark any = nonce
	if nonce == "" {
		mark = bson.D{{Key: "$exists", Value: false}}
	}
	return bson.D{{Key: holdPath(id, "state"), Value: inventory.HoldHeld}, {Key: holdPath(id, "confirming"), Value: mark}}
}

// expiredUnits is what expiredHolds counts in it now, by the store's clock;
// 0 when the clock cannot be read (a sale then finds the stock short).
func (s *Store) expiredUnits(ctx context.Context, it itemDoc) int64 {
	_, units, _ := s.expiredOf(ctx, it)
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

// findHold reads hold id of sku: in the item (returned with the hold),
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
		h.State = h.Settled(lower) // held, or expired by the store's clock
		if h.State == inventory.HoldHeld {
			h.State = inventory.HoldReleased
		}
		if ok, err := s.unhold(ctx, holdConds(*it, []string{id}), h); err != nil {
			return inventory.Hold{}, unknownOutcome("release hold "+id+" of", sku, err)
		} else if ok {
			return h, nil
		}
	}
	return inventory.Hold{}, fmt.Errorf("%w: release hold %s of %q: it kept changing", inventory.ErrConflict, id, sku)
}

// returnHolds returns the units of it's holds expired by the store's clock
// (expiredOf), as returnExpired does. It returns 0 when it returned
// nothing: none expired, or the item changed since it was read.
func (s *Store) returnHolds(ctx context.Context, it itemDoc) (int64, error) {
	ids, units, err := s.expiredOf(ctx, it)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	return s.returnExpired(ctx, it, ids, units)
}

// returnExpired returns the units of it's expired holds ids, units in
// all, in one update conditional on each of them as read in it, and
// records them; 0 when the item changed since it was read.
func (s *Store) returnExpired(ctx context.Context, it itemDoc, ids []string, units int64) (int64, error) {
	hs := make([]inventory.Hold, len(ids))
	for i, id := range ids {
		hs[i] = it.Holds[id]
		hs[i].ID, hs[i].State = id, inventory.HoldExpired
	}
	ok, err := s.unhold(ctx, holdConds(it, ids), hs...)
	if err != nil {
		return 0, unknownOutcome("return the expired holds of", it.SKU, err)
	}
	if !ok {
		return 0, nil // changed since the read: whoever changed it decided
	}
	return units, nil
}

// unhold gives the units of holds hs, of one sku, back to its stock, each
// settled in its State, in one update conditional on cond (the holds as
// read), and then records them (recordHold). ok is false when the update
// matched nothing: nothing changed.
func (s *Store) unhold(ctx context.Context, cond bson.D, hs ...inventory.Hold) (ok bool, err error) {
	var units int64
	set := bson.D{}
	for _, h := range hs {
		units += h.Qty
		set = append(set, bson.E{Key: holdPath(h.ID, "state"), Value: h.State})
	}
	cctx, cancel := s.commitContext(ctx)
	defer cancel()
	res, err := s.items.UpdateOne(cctx, append(bson.D{{Key: "_id", Value: hs[0].SKU}}, cond...), bson.D{
		{Key: "$inc", Value: bson.D{{Key: "stock", Value: units}, {Key: "held", Value: -units}, {Key: "version", Value: int64(1)}}},
		{Key: "$set", Value: set},
	})
	if err != nil || res.MatchedCount == 0 {
		return false, err
	}
	for _, h := range hs {
		s.recordHold(cctx, h)
	}
	return true, nil
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
