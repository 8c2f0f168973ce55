// Package inventory is the stock service's domain, apart from any store: a
// sku's [Item] and the [Order]s of its sales, a decrement [Request] and its
// [Sale], the [Strategy] that performs it, the errors every strategy and
// store answer with ([ErrSoldOut] and the rest), and the rules of valid
// input ([ValidSKU], [ValidKey]). It imports no driver.
//
// The store that keeps the inventory in MongoDB, and the strategies written
// as its updates, are package [github.com/stocklock/stocklock/pkg/inventory/mongostore];
// the registry of strategies is package [github.com/stocklock/stocklock/pkg/strategy].
package inventory
