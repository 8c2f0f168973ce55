package inventory

import (
	"fmt"
	"regexp"
	"time"
)

// Item is one sku's stock, as stored.
type Item struct {
	SKU     string `bson:"_id" json:"sku"`
	Stock   int64  `bson:"stock" json:"stock"`
	Version int64  `bson:"version" json:"version"`
	// Fences maps a lock strategy's name to the highest fencing token that
	// has read the item under that strategy's lock.
	Fences map[string]int64 `bson:"fences,omitempty" json:"fences"`
	// Pending holds, by order id, the orders of sales whose stock is taken
	// but whose order is not yet in the ledger. The write that takes the
	// stock adds the entry in the same single-document update, so a unit
	// taken and its order are one fact; recording the order removes it
	// (see Store.RecoverPending).
	Pending map[string]Order `bson:"pending,omitempty" json:"pending,omitempty"`
	// Aborted holds, by order id, the keyed attempts that recovery gave
	// up before their stock write landed, with when it did. No stock write
	// for an order id in it is accepted (see Store.RecoverKeys).
	Aborted map[string]time.Time `bson:"aborted,omitempty" json:"aborted,omitempty"`
	// Restocks holds the last RestockKeys restocks applied to the item, by
	// a hash of their idempotency key: a restock whose key is here is not
	// applied again (see mongostore's Store.Restock). Not shown by the API.
	Restocks map[string]Restock `bson:"restocks,omitempty" json:"-"`
	// AbortedThrough gives up every keyed order id up to it, in byte
	// order: an entry of Aborted moves into it once no attempt still open
	// has a lower order id, so that Aborted stays small. No stock write
	// of a keyed order id at or below it is accepted.
	AbortedThrough string `bson:"aborted_through,omitempty" json:"aborted_through,omitempty"`
	// Held counts the units of the item's holds stored as held: they are
	// not in Stock, so that no sale of any strategy can take them. Stock
	// + Held + the units of the sku's orders (in the ledger or pending)
	// is the same at every read, whatever the holds do.
	Held int64 `bson:"held,omitempty" json:"held"`
	// Holds holds, by hold id, the item's open holds, and the settled
	// ones until they are recorded in the holds collection (see
	// mongostore's Store.CreateHold).
	Holds map[string]Hold `bson:"holds,omitempty" json:"holds,omitempty"`
}

// Restock is one relative stock change, applied once per idempotency key.
type Restock struct {
	Qty int64 `bson:"qty"`
	// Seq orders the item's restocks, oldest first: the item's version
	// when the restock was decided.
	Seq int64 `bson:"seq"`
}

// RestockKeys is how many restock keys an item remembers: a retry of a
// restock is recognised as long as fewer than this many other restocks of
// the item were applied after it.
const RestockKeys = 100

// MaxRestockQty is the largest number of units one restock may add or
// remove.
const MaxRestockQty = 1_000_000_000

// CheckRestock returns ErrInvalid, saying why, unless sku is valid, key is
// a valid idempotency key, and qty is a whole number of units from
// -MaxRestockQty to MaxRestockQty other than 0.
func CheckRestock(sku, key string, qty int64) error {
	if err := CheckSKU(sku); err != nil {
		return err
	}
	if !ValidKey(key) {
		return fmt.Errorf("%w: restock key %q must be 1 to %d printable ASCII characters", ErrInvalid, key, MaxKeyLen)
	}
	if qty == 0 || qty < -MaxRestockQty || qty > MaxRestockQty {
		return fmt.Errorf("%w: restock qty %d must be from -%d to %d, and not 0", ErrInvalid, qty, MaxRestockQty, MaxRestockQty)
	}
	return nil
}

// MaxSKULen is the longest sku accepted, in bytes.
const MaxSKULen = 64

var skuPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ValidSKU reports whether sku is 1 to 64 of A-Z, a-z, 0-9, '.', '_' and
// '-', and not "." or "..". The restriction keeps skus safe as lock keys,
// document ids and URL path segments alike: "." and ".." would be rewritten
// by any client or proxy that cleans paths.
func ValidSKU(sku string) bool {
	return sku != "." && sku != ".." && skuPattern.MatchString(sku)
}

// CheckSKU returns ErrInvalid, saying why, unless ValidSKU(sku).
func CheckSKU(sku string) error {
	if !ValidSKU(sku) {
		return fmt.Errorf("%w: sku %q must be 1 to %d of [A-Za-z0-9._-], and not . or ..", ErrInvalid, sku, MaxSKULen)
	}
	return nil
}

// CheckQty returns ErrInvalid unless qty is positive.
func CheckQty(qty int64) error {
	if qty <= 0 {
		return fmt.Errorf("%w: qty %d must be positive", ErrInvalid, qty)
	}
	return nil
}
