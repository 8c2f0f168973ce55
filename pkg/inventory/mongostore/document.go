package mongostore

import (
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"
)

// itemDoc is the item document as the items collection holds it, every
// field of it (doc.go, "The item document", says what each means and who
// writes it). The store and its strategies read and decide on it;
// inventory.Item, what the package answers, is item().
type itemDoc struct {
	SKU            string                     `bson:"_id"`
	Stock          int64                      `bson:"stock"`
	Version        int64                      `bson:"version"`
	Fences         map[string]int64           `bson:"fences,omitempty"`
	Pending        map[string]inventory.Order `bson:"pending,omitempty"`
	Aborted        map[string]time.Time       `bson:"aborted,omitempty"`
	AbortedThrough string                     `bson:"aborted_through,omitempty"`
	Restocks       map[string]restock         `bson:"restocks,omitempty"`
	Held           int64                      `bson:"held,omitempty"`
	Holds          map[string]inventory.Hold  `bson:"holds,omitempty"`
	ConfirmClock   time.Time                  `bson:"confirm_clock,omitempty"`
	Epoch          int64                      `bson:"epoch,omitempty"` // redis-stock's
	// The buckets strategy's (see split).
	Split   *split `bson:"split,omitempty"`
	Buckets int    `bson:"buckets,omitempty"`
	LastGen int64  `bson:"last_gen,omitempty"`
}

// restock is one entry of an item's restocks: a relative stock change,
// applied once per idempotency key (doc.go says what qty and seq are).
type restock struct {
	Qty int64 `bson:"qty"`
	Seq int64 `bson:"seq"`
}

// restockKeys is how many restock keys an item remembers: a retry of a
// restock is recognised as long as fewer than this many other restocks of
// the item were applied after it.
const restockKeys = 100

// item is d as the package answers it: the fields the API shows.
func (d itemDoc) item() inventory.Item {
	return inventory.Item{
		SKU: d.SKU, Stock: d.Stock, Version: d.Version, Fences: d.Fences, Pending: d.Pending,
		Aborted: d.Aborted, AbortedThrough: d.AbortedThrough, Held: d.Held, Holds: d.Holds,
	}
}
