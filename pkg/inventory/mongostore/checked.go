package mongostore

import (
	"context"

	"github.com/stocklock/stocklock/pkg/inventory"
)

// checked is every strategy Build returns: it validates the request and
// checks the context once, before any other wrapper or any store work,
// and answers as the strategies used to each on their own: Validate's
// error (it wraps inventory.ErrInvalid) for a request that is not valid,
// context.Cause for a context already done.
//
// A strategy of this package may therefore assume, as a database/sql/driver
// may of what database/sql hands it, that its Decrement is called with a
// request that passed Validate and a context that was live when it was
// called; it checks neither again. Called directly (NewAtomic(s).Decrement),
// it is trusted to be called so.
//
// Build puts it outermost (see Built), so a request that does not pass
// costs no read. A strategy that is an inventory.Holder stays one
// (checkedHolder); its Hold is its own and validates its request itself
// (Store.createHold, Locked.Hold).
type checked struct{ inventory.Strategy }

// checkedHolder is checked for a strategy that takes part in holds.
type checkedHolder struct{ checked }

// Hold implements inventory.Holder.
func (c checkedHolder) Hold(ctx context.Context, req inventory.HoldRequest) (inventory.Hold, error) {
	return c.Strategy.(inventory.Holder).Hold(ctx, req)
}

// check returns st checked (see checked).
func check(st inventory.Strategy) inventory.Strategy {
	if _, ok := st.(inventory.Holder); ok {
		return checkedHolder{checked{st}}
	}
	return checked{st}
}

// unwrap returns the strategy Build wrapped in st (see Built): st
// itself when it is not wrapped.
func unwrap(st inventory.Strategy) inventory.Strategy {
	for inner := wrappedIn(st); inner != nil; inner = wrappedIn(st) {
		st = inner
	}
	return st
}

// layerOf returns the layer of st (st itself, or one that st wraps, see
// Built) that is a T, if there is one.
func layerOf[T any](st inventory.Strategy) (T, bool) {
	for ; st != nil; st = wrappedIn(st) {
		if l, ok := st.(T); ok {
			return l, true
		}
	}
	var none T
	return none, false
}

// wrappedIn returns the strategy the layer st wraps, nil when st is none
// of Build's layers.
func wrappedIn(st inventory.Strategy) inventory.Strategy {
	switch w := st.(type) {
	case checked:
		return w.Strategy
	case checkedHolder:
		return w.Strategy
	case *soldOutShortcut:
		return w.Strategy
	case returning:
		return w.Strategy
	case *splitAware:
		return w.Strategy
	}
	return nil
}

// Decrement implements inventory.Strategy: the check, then the strategy.
func (c checked) Decrement(ctx context.Context, req inventory.Request) (inventory.Sale, error) {
	if err := req.Validate(); err != nil {
		return inventory.Sale{}, err
	}
	if ctx.Err() != nil {
		return inventory.Sale{}, context.Cause(ctx)
	}
	return c.Strategy.Decrement(ctx, req)
}
