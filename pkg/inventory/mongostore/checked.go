package mongostore

import (
	"context"

	"github.com/stocklock/stocklock/pkg/inventory"
)

// checked is every strategy Build returns: it validates the request and
// checks the context once, before any other wrapper or any store work:
// Validate's error (it wraps inventory.ErrInvalid) for a request that is
// not valid, context.Cause for a context already done.
//
// A strategy of this package may therefore assume, as a database/sql/driver
// may of what database/sql hands it, that its Decrement is called with a
// request that passed Validate and a context that was live when it was
// called; it checks neither again. Called directly (NewAtomic(s).Decrement),
// it is trusted to be called so.
//
// Build puts it outermost (see Built), so a request that does not pass
// costs no read. A strategy's part in holds (Built.Holder) is not
// wrapped: its Hold validates its request itself (Store.createHold,
// Locked.Hold).
type checked struct{ inventory.Strategy }

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
