package inventory

import (
	"fmt"
	"regexp"
	"time"
)

// Item is one sku's stock as a user of the API sees it (pkg/stockapi's
// Item, but for the replica that answers): what a store answers. A store
// keeps its own document with the fields of its protocols (mongostore's
// itemDoc) and converts; Fences, Pending, Aborted and AbortedThrough are
// such fields, here only because the API shows them.
type Item struct {
	SKU     string
	Stock   int64
	Version int64
	// Fences maps a lock strategy's name to the highest fencing token that
	// has read the item under that strategy's lock.
	Fences map[string]int64
	// Pending holds, by order id, the orders of sales whose stock is taken
	// but whose order is not yet in the ledger (see Store.RecoverPending).
	Pending map[string]Order
	// Aborted holds, by order id, the keyed attempts that recovery gave
	// up before their stock write landed, with when it did (see
	// Store.RecoverKeys).
	Aborted map[string]time.Time
	// AbortedThrough gives up every keyed order id up to it, in byte
	// order, as Aborted does for one.
	AbortedThrough string
	// Held counts the units of the item's holds stored as held: they are
	// not in Stock, so that no sale of any strategy can take them. Stock
	// + Held + the units of the sku's orders (in the ledger or pending)
	// is the same at every read, whatever the holds do.
	Held int64
	// Holds holds, by hold id, the item's open holds, and the settled
	// ones until they are recorded in the holds collection (see
	// mongostore's Store.CreateHold).
	Holds map[string]Hold
}

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
