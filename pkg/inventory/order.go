package inventory

import "time"

// Order is one sale in the ledger, and, until it is recorded there, the
// pending entry of that sale in its item document (see Item.Pending).
type Order struct {
	ID       string    `bson:"_id" json:"order_id"`
	SKU      string    `bson:"sku" json:"sku"`
	Qty      int64     `bson:"qty" json:"qty"`
	Replica  string    `bson:"replica" json:"replica"`
	Strategy string    `bson:"strategy" json:"strategy"`
	Fence    int64     `bson:"fence" json:"fence"` // the lease token the stock write carried; 0 without a lock
	At       time.Time `bson:"at" json:"at"`
	// Remaining is the stock the sale left, nil when unknown. Most
	// strategies know it before their stock write and store it in the
	// pending entry; atomic's $inc learns it from the write's reply, so it
	// is nil for an atomic sale recorded by anyone but the replica that
	// read that reply. It is nil too for a sale from one bucket of a split
	// stock (its write does not see the total) and for a hold's confirm
	// (Hold.Order). stockapi.Sale.Remaining states what the API answers.
	Remaining *int64 `bson:"remaining,omitempty" json:"remaining,omitempty"`
	// Attempts counts the compare-and-set attempts of an optimistic sale.
	Attempts int `bson:"attempts,omitempty" json:"attempts,omitempty"`
	// Key is the idempotency key of the request, if it had one.
	Key string `bson:"key,omitempty" json:"key,omitempty"`
}

// Sale returns the Sale an order stands for.
func (o Order) Sale() Sale {
	remaining := int64(-1)
	if o.Remaining != nil {
		remaining = *o.Remaining
	}
	return Sale{
		OrderID: o.ID, SKU: o.SKU, Qty: o.Qty, Remaining: remaining, Strategy: o.Strategy,
		Replica: o.Replica, Fence: o.Fence, At: o.At, Attempts: max(o.Attempts, 1), Key: o.Key,
	}
}

// Limits of one page of orders.
const (
	DefaultOrdersLimit = 100
	MaxOrdersLimit     = 1000
)

// OrdersQuery selects one page of a sku's orders, oldest first.
type OrdersQuery struct {
	SKU   string
	Since time.Time // only orders at or after it; zero: all
	After string    // the Next of the previous page; empty: the first page
	Limit int       // orders per page, 1 to MaxOrdersLimit; 0: DefaultOrdersLimit
}

// OrdersPage is one page of orders.
type OrdersPage struct {
	Orders []Order
	Next   string // cursor of the next page; empty on the last page
}
