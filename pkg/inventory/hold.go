package inventory

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Bounds of a hold's time to live.
const (
	MinHoldTTL = time.Second
	MaxHoldTTL = 15 * time.Minute
)

// Errors of holds. Like the others, a call that returns one of them sold
// nothing and changed nothing.
var (
	// ErrHoldNotFound means the item has no hold with that id, and none
	// was recorded.
	ErrHoldNotFound = errors.New("inventory: hold not found")
	// ErrHoldExpired means the hold's expiry has passed by the store's
	// clock before its confirm reached the store (or its units were
	// already returned to the stock, which happens only once it has):
	// the confirm is refused and sells nothing.
	ErrHoldExpired = errors.New("inventory: hold expired")
	// ErrHoldReleased means the hold was released: its units went back to
	// the stock, and it cannot be confirmed.
	ErrHoldReleased = errors.New("inventory: hold released")
	// ErrHoldConfirmed means the hold was confirmed: its units are sold,
	// and it cannot be released.
	ErrHoldConfirmed = errors.New("inventory: hold confirmed")
	// ErrHoldsUnsupported means the strategy takes no part in holds (see
	// pkg/strategy's Info.Holds), or the item cannot hold units now (its
	// stock is split across buckets).
	ErrHoldsUnsupported = errors.New("inventory: holds not supported")
)

// The states of a hold.
const (
	// HoldHeld: its units are held; it may be confirmed until it expires.
	HoldHeld = "held"
	// HoldConfirmed: confirmed before it expired; its units are sold, in
	// one order of the ledger whose id is the hold's.
	HoldConfirmed = "confirmed"
	// HoldReleased: released by its buyer; its units went back.
	HoldReleased = "released"
	// HoldExpired: its expiry passed by the store's clock with no
	// confirm before it; its units are available again.
	HoldExpired = "expired"
)

// Hold is one reservation of units of a sku, as the item records it while
// it is open (Item.Holds) and as the holds record keeps it once it is
// settled.
type Hold struct {
	ID       string `bson:"-" json:"hold_id,omitempty"`
	SKU      string `bson:"sku" json:"sku"`
	Qty      int64  `bson:"qty" json:"qty"`
	Strategy string `bson:"strategy" json:"strategy"`
	Replica  string `bson:"replica" json:"replica"`
	// Created and Expires are on the store's clock: Created is an upper
	// estimate of it when the hold was decided, and Expires is Created
	// plus the hold's time to live.
	Created time.Time `bson:"created" json:"created_at"`
	Expires time.Time `bson:"expires" json:"expires_at"`
	// State is one of HoldHeld, HoldConfirmed, HoldReleased, HoldExpired,
	// as stored. An entry stored as held may already be expired: see
	// Settled.
	State string `bson:"state" json:"state"`
	// ConfirmedAt is the store's own clock when the confirm's first
	// write reached the item ($currentDate): a confirm stands only if it
	// is before Expires. Set, with State confirmed, by its second write.
	ConfirmedAt *time.Time `bson:"confirmed_at,omitempty" json:"confirmed_at,omitempty"`
	// Confirming is the nonce of the confirm whose first write reached
	// the hold last: its second write requires it unchanged.
	Confirming string `bson:"confirming,omitempty" json:"-"`
	// Key is the Idempotency-Key of the request that created it.
	Key string `bson:"key,omitempty" json:"idempotency_key,omitempty"`
	// Fence is the lease token the creating write carried; 0 without a lock.
	Fence int64 `bson:"fence,omitempty" json:"fence"`
	// ConfirmReplica and ConfirmKey are the replica and the
	// Idempotency-Key of the confirm, once there is one.
	ConfirmReplica string `bson:"confirm_replica,omitempty" json:"-"`
	ConfirmKey     string `bson:"confirm_key,omitempty" json:"-"`
}

// Settled returns the state of a hold stored as h, with lower an estimate
// of the store's clock that is no later than it: a hold stored as held is
// expired when lower is at or past its expiry, and held otherwise. "Held"
// may thus be a hold that has just expired and that no one has noticed
// yet. "Expired" means that no confirm can stamp it in time any more; a
// confirm that stamped it in time before (see Confirming) may still sell
// it with its second write, until a write returns its units.
func (h Hold) Settled(lower time.Time) string {
	if h.State == HoldHeld && !lower.Before(h.Expires) {
		return HoldExpired
	}
	return h.State
}

// Order returns the order that confirming h records: its id is the hold's.
func (h Hold) Order() Order {
	at := h.Expires
	if h.ConfirmedAt != nil {
		at = *h.ConfirmedAt
	}
	return Order{ID: h.ID, SKU: h.SKU, Qty: h.Qty, Replica: h.ConfirmReplica, Strategy: h.Strategy, Fence: h.Fence, At: at, Key: h.ConfirmKey}
}

// HoldRequest asks for a hold.
type HoldRequest struct {
	SKU string
	Qty int64
	TTL time.Duration
	// ID is the hold's id; empty means a fresh one. Store.HoldOnce sets it.
	ID string
	// Key is the Idempotency-Key it records; empty means none.
	Key string
}

// Validate checks the request before any I/O: ErrInvalid, saying what is
// wrong, or nil.
func (r HoldRequest) Validate() error {
	if err := (Request{SKU: r.SKU, Qty: r.Qty, OrderID: r.ID, Key: r.Key}).Validate(); err != nil {
		return err
	}
	return CheckHoldTTL(r.TTL)
}

// CheckHoldTTL returns ErrInvalid unless ttl is a whole number of
// milliseconds from MinHoldTTL to MaxHoldTTL.
func CheckHoldTTL(ttl time.Duration) error {
	if ttl < MinHoldTTL || ttl > MaxHoldTTL || ttl%time.Millisecond != 0 {
		return fmt.Errorf("%w: hold ttl %v must be whole milliseconds from %v to %v", ErrInvalid, ttl, MinHoldTTL, MaxHoldTTL)
	}
	return nil
}

// HoldID reports whether id can be a hold's id (an order id: it becomes
// the id of the order a confirm records).
func HoldID(id string) bool { return orderIDPattern.MatchString(id) }

// Holder is a Strategy that takes part in holds (pkg/strategy's
// Info.Holds): it creates a hold under its own discipline (a conditional
// update, or a lock's lease and fence), and its sales take the units of
// expired holds in the same conditional update that sells. Confirming,
// releasing and reading a hold are the store's, whatever strategy
// created it: none of them takes stock that is not the hold's.
type Holder interface {
	Strategy
	// Hold takes req.Qty units into a new hold: ErrSoldOut when the
	// stock, with the units of expired holds, is short.
	Hold(ctx context.Context, req HoldRequest) (Hold, error)
}
