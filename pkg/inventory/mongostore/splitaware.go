package mongostore

import (
	"context"
	"errors"

	"github.com/stocklock/stocklock/pkg/inventory"

	"github.com/stocklock/stocklock/pkg/strategy"
)

// itemSoldOut is the sold out of a strategy that read the item document
// and found its stock short, saying whether that read found the item
// split. Not split, the item held all of the sku's stock at that read, so
// the sold out is exact there and SplitAware answers it as it is, with no
// read of its own; split, the buckets decide.
type itemSoldOut struct {
	*inventory.SoldOutError
	split bool
}

// Unwrap makes errors.As(err, **inventory.SoldOutError) find the sold out.
func (e *itemSoldOut) Unwrap() error { return e.SoldOutError }

// soldOutOf is the ErrSoldOut of a decrement that read it and found its
// stock short of qty (see itemSoldOut).
func soldOutOf(it itemDoc, qty int64) error {
	return &itemSoldOut{SoldOutError: &inventory.SoldOutError{SKU: it.SKU, Stock: it.Stock, Qty: qty}, split: it.Split != nil}
}

// splitAware is a strategy that sells from the item document alone, made
// to sell from its buckets too when the buckets strategy has split the
// item: without it, a request of that strategy would answer sold out
// while the buckets hold the stock. Its sold out stands only for an item
// that is not split; for a split one the buckets strategy decides, and
// records the sale under this strategy's name.
type splitAware struct {
	inventory.Strategy
	buckets *Buckets
}

// newSplitAware returns st made to sell from the buckets of an item the
// buckets strategy has split (see Buckets), with k as that strategy's
// bucket count. The buckets strategy itself, and one that is not safe, is
// returned as it is.
func newSplitAware(st inventory.Strategy, s *Store, k int) (inventory.Strategy, error) {
	if in, ok := strategy.Lookup(st.Name()); st.Name() == strategy.Buckets || (ok && !in.Safe) {
		return st, nil
	}
	b, err := NewBuckets(s, k)
	if err != nil {
		return nil, err
	}
	return &splitAware{Strategy: st, buckets: b}, nil
}

// Decrement implements Strategy. A sold out that is no itemSoldOut (one
// that redis-stock or a fenced read decided) is checked with a read of
// the item.
func (w *splitAware) Decrement(ctx context.Context, req inventory.Request) (inventory.Sale, error) {
	sale, err := w.Strategy.Decrement(ctx, req)
	if !errors.Is(err, inventory.ErrSoldOut) {
		return sale, err
	}
	var seen *itemSoldOut
	if errors.As(err, &seen) {
		if !seen.split {
			return sale, seen.SoldOutError
		}
		return w.buckets.decrement(ctx, req, w.Name())
	}
	it, gerr := w.buckets.store.getDoc(ctx, w.buckets.store.items, req.SKU)
	if gerr != nil || (it.Split == nil && it.Stock < req.Qty) {
		// Not split, and short at this read, which is the moment the
		// sold out holds (a merge may have unsplit the item since the
		// strategy looked).
		return sale, err
	}
	return w.buckets.decrement(ctx, req, w.Name())
}
