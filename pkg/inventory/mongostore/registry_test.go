package mongostore

import (
	"context"
	"errors"
	"testing"

	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/pkg/strategy"

	"github.com/stocklock/stocklock/pkg/lock"
)

var errGone = errors.New("gone")

// TestRegistry: every strategy of the registry (pkg/strategy, whose own
// TestRegistry checks names and docs pages) builds from a replica's
// dependencies into what its Info says, and a lock strategy refuses to
// build without its lock. What Build returns is checked outermost: a
// request that is not valid, or whose context is done, is refused before
// any other layer; a Holder is one, and a strategy that is not has its
// expired holds returned (returning).
func TestRegistry(t *testing.T) {
	s := testStore(t)
	lockers := map[string]*lock.Locker{}
	for _, svc := range strategy.LockServices() {
		lockers[svc.Name] = localLocker(t)
	}
	deps := Deps{Store: s, Lockers: lockers, Fencing: true, RedisStock: RedisStockOptions{Client: testRedis(t)}, NATS: testNATS(t)}
	for _, in := range strategy.All() {
		st, err := Build(in, deps)
		if err != nil || st.Name() != in.Name {
			t.Fatalf("%s: Build = %v, %v", in.Name, st, err)
		}
		if _, err := st.Decrement(t.Context(), inventory.Request{SKU: "x", Qty: 0}); !errors.Is(err, inventory.ErrInvalid) {
			t.Errorf("%s: Decrement of qty 0: %v, want inventory.ErrInvalid", in.Name, err)
		}
		ctx, cancel := context.WithCancelCause(t.Context())
		cancel(errGone)
		if _, err := st.Decrement(ctx, inventory.Request{SKU: "x", Qty: 1}); err != errGone {
			t.Errorf("%s: Decrement with a canceled context: %v, want its cause", in.Name, err)
		}
		switch st.Strategy.(type) {
		case checked:
		default:
			t.Errorf("%s: the outermost layer is a %T, not the check", in.Name, st.Strategy)
		}
		l, locked := st.Locked, st.Locked != nil
		if locked != (in.Lock != strategy.LockNone) || (locked && unwrap(st.Strategy) != inventory.Strategy(l)) {
			t.Errorf("%s: lock service %q, but built a %T (Locked %v)", in.Name, in.Lock, unwrap(st.Strategy), l)
		}
		if (st.RedisStock != nil) != (in.Name == strategy.RedisStock) {
			t.Errorf("%s: RedisStock %v", in.Name, st.RedisStock)
		}
		if (st.Holder != nil) != in.Holds {
			t.Errorf("%s: the registry says Holds %v, but Build's Holder is %v", in.Name, in.Holds, st.Holder)
		}
		_, returns := layerOf[returning](st.Strategy)
		if returns == in.Holds {
			t.Errorf("%s: Holds %v, and its expired holds returned by a layer: %v", in.Name, in.Holds, returns)
		}
		if locked && l.Fencing() != in.Fenced {
			t.Errorf("%s: fencing %v, want %v", in.Name, l.Fencing(), in.Fenced)
		}
		if in.Name == strategy.RedisStock {
			if _, err := Build(in, Deps{Store: s}); !errors.Is(err, errNoRedis) {
				t.Errorf("%s: built without Redis: %v", in.Name, err)
			}
		}
		if (st.Queued != nil) != (in.Name == strategy.Queued) {
			t.Errorf("%s: Queued %v", in.Name, st.Queued)
		}
		if in.Name == strategy.Queued {
			if _, err := Build(in, Deps{Store: s, Lockers: lockers}); !errors.Is(err, ErrNoNATS) {
				t.Errorf("%s: built without NATS: %v", in.Name, err)
			}
		}
		if in.Lock != strategy.LockNone {
			missing := Deps{Store: s, Lockers: map[string]*lock.Locker{}}
			if _, err := Build(in, missing); err == nil {
				t.Errorf("%s: built without its %s lock", in.Name, in.Lock)
			}
		}
	}
}
