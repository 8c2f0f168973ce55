// Package stockapi holds the JSON bodies of the stock service's HTTP API,
// once: the replica (services/stock/server) writes and reads them, and
// the Go client (pkg/stockclient, which re-exports them) sends and
// decodes them. Each type is the schema of the same name in the service's
// OpenAPI document (services/stock/server/openapi.json, GET /openapi.json;
// ErrorBody is its Error), and the package's tests fail when a field's
// JSON name, type, null case or omitempty differs from it.
//
// The package imports nothing of the service: the replica converts its
// domain values (pkg/inventory) into these.
package stockapi

import (
	"reflect"
	"strings"
	"time"
)

// Item is an item as the service shows it: the answer of GET, PUT and
// POST .../restock on /v1/items/{sku}.
type Item struct {
	SKU     string `json:"sku"`
	Stock   int64  `json:"stock"`
	Version int64  `json:"version"` // counts writes to the stock; also its ETag, for If-Match
	// Fences holds, per lock strategy, the highest fencing token that has
	// read the item; {} when none has.
	Fences map[string]int64 `json:"fences"`
	// Pending holds by order id the sales whose stock is taken but whose
	// order is not yet in the ledger.
	Pending map[string]Order `json:"pending,omitempty"`
	// Aborted holds by order id the keyed requests given up before their
	// stock write, with when.
	Aborted map[string]time.Time `json:"aborted,omitempty"`
	// AbortedThrough gives up every keyed request whose order id is at or
	// below it, in byte order: recovery moves the entries of Aborted here
	// once no request still open has a lower order id.
	AbortedThrough string `json:"aborted_through,omitempty"`
	// Held counts the units in holds not yet confirmed, released or
	// returned: Stock + Held + the units of the ledger's orders is the
	// same at every read.
	Held int64 `json:"held"`
	// Holds holds by hold id the item's open holds, and settled ones
	// until recovery records them.
	Holds   map[string]ItemHold `json:"holds,omitempty"`
	Replica string              `json:"replica"` // the replica that answered
}

// ItemHold is a hold as its item shows it (Item.Holds), by the hold's id.
// GET /v1/items/{sku}/holds/{id} answers the hold itself (Hold).
type ItemHold struct {
	ID        string     `json:"hold_id,omitempty"` // usually absent: the map's key is the id
	SKU       string     `json:"sku"`
	Qty       int64      `json:"qty"`
	Strategy  string     `json:"strategy"`
	Replica   string     `json:"replica"` // the replica that created it
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt time.Time  `json:"expires_at"`
	State     string     `json:"state"` // as stored: a hold stored as held may be expired by the store's clock
	Confirmed *time.Time `json:"confirmed_at,omitempty"`
	Key       string     `json:"idempotency_key,omitempty"`
	Fence     int64      `json:"fence"`
}

// StockChange is the body of PUT /v1/items/{sku}.
type StockChange struct {
	Stock int64 `json:"stock"`
	// Split sets the stock split across the replica's buckets, as the
	// buckets strategy sells it (docs/buckets.md). Not with If-Match.
	Split bool `json:"split,omitempty"`
}

// Restock is the body of POST /v1/items/{sku}/restock: units to add, or,
// negative, to remove.
type Restock struct {
	Qty int64 `json:"qty"`
}

// DecrementRequest is the body of POST /v1/items/{sku}/decrement.
type DecrementRequest struct {
	Qty int64 `json:"qty"`
	// Strategy names a strategy of the service's registry (pkg/strategy);
	// missing or null, the replica's default.
	Strategy string `json:"strategy,omitempty"`
}

// HoldRequest is the body of POST /v1/items/{sku}/holds.
type HoldRequest struct {
	Qty   int64 `json:"qty"`
	TTLMS int64 `json:"ttl_ms"` // how long the hold lasts, in milliseconds of the store's clock
	// Strategy is as in DecrementRequest.
	Strategy string `json:"strategy,omitempty"`
}

// Sale is a successful decrement, or a hold's confirm: the answer of
// POST .../decrement and POST .../holds/{id}/confirm.
type Sale struct {
	OrderID string `json:"order_id"`
	SKU     string `json:"sku"`
	Qty     int64  `json:"qty"`
	// Remaining is the stock the sale left, or null when the sale cannot
	// tell it:
	//   - a sale taken from one bucket of a split stock (by the buckets
	//     strategy, or by another safe strategy selling an item the
	//     buckets strategy split), whose write does not see the total;
	//   - a hold's confirm, whose write does not touch the stock (the
	//     hold's create took the units);
	//   - the replay (same Idempotency-Key) of an atomic sale whose order
	//     was recorded, or is still pending, from the entry written before
	//     its stock write, not by the replica that read the write's reply
	//     (it died, or a retry recorded it first): atomic learns the stock
	//     from that reply;
	//   - a queued order read (GET .../orders/{order_id}, or a keyed retry
	//     of one not waited for) while it is still pending in the item,
	//     recorded false: queued's consumer writes the entry before it
	//     learns the stock.
	// A replay's remaining is the first answer's, but in that last case.
	Remaining *int64 `json:"remaining"`
	Strategy  string `json:"strategy"`
	// Replica is the replica that sold (in a replay, the first request's).
	Replica string `json:"replica"`
	// Fence is the lease token the stock write carried; 0 without a lock.
	Fence int64 `json:"fence"`
	// Attempts counts compare-and-set attempts (optimistic); 1 otherwise.
	Attempts int       `json:"attempts"`
	At       time.Time `json:"at"`
	// Recorded is false when the stock was taken but the order is not in
	// the ledger yet; the sale stands, and recovery records it.
	Recorded bool `json:"recorded"`
	// IdempotencyKey is the request's Idempotency-Key, if it had one.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Replayed is not in the body: it is the answer's Idempotent-Replayed
	// header, which pkg/stockclient sets it from. True when the answer is
	// an earlier request's sale (same Idempotency-Key, or a confirm of a
	// confirmed hold): nothing was sold by this one.
	Replayed bool `json:"-"`
}

// QueuedOrder is an order the service has taken into the queued
// strategy's log and not decided yet: the 202 answer of POST .../decrement
// sent with Prefer: respond-async, and of GET .../orders/{order_id} while
// the order waits. Its Location header names the order to poll.
type QueuedOrder struct {
	OrderID  string `json:"order_id"`
	SKU      string `json:"sku"`
	Qty      int64  `json:"qty"`
	Strategy string `json:"strategy"`
	// State is "queued": in the log, neither sold nor refused yet.
	State string `json:"state"`
	// Replica is the replica that took the order into the log.
	Replica string    `json:"replica"`
	At      time.Time `json:"at"` // when the order was made
	// IdempotencyKey is the request's Idempotency-Key, if it had one.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Replayed is not in the body: it is the answer's Idempotent-Replayed
	// header. True when the answer is an earlier request's order (same
	// Idempotency-Key): nothing was queued by this one.
	Replayed bool `json:"-"`
}

// OrderQueued is QueuedOrder.State.
const OrderQueued = "queued"

// Order is one order of the ledger, or a pending one (Item.Pending).
type Order struct {
	ID       string    `json:"order_id"`
	SKU      string    `json:"sku"`
	Qty      int64     `json:"qty"`
	Replica  string    `json:"replica"`
	Strategy string    `json:"strategy"`
	Fence    int64     `json:"fence"` // the lease token the stock write carried; 0 without a lock
	At       time.Time `json:"at"`
	// Remaining is the stock the sale left, absent in the cases where
	// Sale.Remaining is null: a sale from one bucket of a split stock, a
	// hold's confirm, and an atomic sale recorded from its pending entry
	// (always absent while it is pending: atomic writes the entry before
	// it learns the stock).
	Remaining *int64 `json:"remaining,omitempty"`
	Attempts  int    `json:"attempts,omitempty"` // optimistic's compare-and-set attempts, when more than one
	Key       string `json:"key,omitempty"`      // the request's Idempotency-Key
}

// OrdersPage is one page of the ledger: the answer of
// GET /v1/items/{sku}/orders.
type OrdersPage struct {
	SKU     string  `json:"sku"`
	Replica string  `json:"replica"`
	Count   int     `json:"count"` // orders in this page
	Orders  []Order `json:"orders"`
	// Next is the cursor of the next page (pass it as ?after=); absent on
	// the last page.
	Next string `json:"next,omitempty"`
}

// Hold is a hold as the service shows it (docs/holds.md): the answer of
// a hold's create, read and release.
type Hold struct {
	ID       string `json:"hold_id"`
	SKU      string `json:"sku"`
	Qty      int64  `json:"qty"`
	State    string `json:"state"` // held, confirmed, released or expired
	Strategy string `json:"strategy"`
	Replica  string `json:"replica"` // the replica that answered
	// CreatedAt and ExpiresAt are on the store's clock; a confirm whose
	// write reaches the store at or after ExpiresAt is refused.
	CreatedAt   time.Time  `json:"created_at"`
	ExpiresAt   time.Time  `json:"expires_at"`
	ConfirmedAt *time.Time `json:"confirmed_at,omitempty"` // present once confirmed
	// OrderID is the order a confirm recorded (the hold's id); present
	// once confirmed.
	OrderID string `json:"order_id,omitempty"`
	Fence   int64  `json:"fence"`
	Key     string `json:"idempotency_key,omitempty"` // the create's Idempotency-Key
	// Replayed is not in the body: it is the answer's Idempotent-Replayed
	// header, which pkg/stockclient sets it from. True when the answer is
	// an earlier create's hold (same Idempotency-Key): nothing was held by
	// this one.
	Replayed bool `json:"-"`
}

// Health is the answer of /healthz and /readyz.
type Health struct {
	Status  string `json:"status"` // ok (healthz) or ready (readyz)
	Replica string `json:"replica"`
	// LocksHeld is the number of item leases the replica holds now, per
	// lock strategy: fault drills read it to find the holder to stall.
	LocksHeld map[string]int `json:"locks_held"`
	// Checks is each dependency's state, "ok" or "failing" (readyz).
	Checks map[string]string `json:"checks,omitempty"`
}

// ErrorBody is the body of every error answer (the OpenAPI schema Error).
type ErrorBody struct {
	Code     string `json:"error"`   // the error code: branch on it
	Message  string `json:"message"` // for people; never branch on it
	Replica  string `json:"replica"` // the replica that answered
	SKU      string `json:"sku,omitempty"`
	Strategy string `json:"strategy,omitempty"`
	// Stock and Qty explain a sold_out or an insufficient_stock: what was
	// left, what was asked.
	Stock *int64 `json:"stock,omitempty"`
	Qty   *int64 `json:"qty,omitempty"`
	// Checks explains a not_ready: each dependency's state.
	Checks map[string]string `json:"checks,omitempty"`
}

// Fields returns the JSON names of the fields that v, a struct of this
// package, encodes, in their order. The replica accepts exactly these in
// a request body.
func Fields(v any) []string {
	t := reflect.TypeOf(v)
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
	}
	return names
}
