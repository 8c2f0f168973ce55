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
// build without its lock. What Build returns is checked: a request that
// is not valid, or whose context is done, is refused before the strategy,
// and stays so under SplitAware and SoldOutShortcut.
func TestRegistry(t *testing.T) {
	s := testStore(t)
	lockers := map[string]*lock.Locker{}
	for _, svc := range strategy.LockServices() {
		lockers[svc.Name] = localLocker(t)
	}
	deps := Deps{Store: s, Lockers: lockers, Fencing: true, RedisStock: RedisStockOptions{Client: testRedis(t)}}
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
		w, err := SplitAware(st, s, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := unchecked(SoldOutShortcut(w, s, nil)); !ok {
			t.Errorf("%s: SplitAware and SoldOutShortcut hid the check", in.Name)
		}
		l, locked := Unchecked(st).(*Locked)
		if locked != (in.Lock != strategy.LockNone) {
			t.Errorf("%s: lock service %q, but built a %T", in.Name, in.Lock, st)
		}
		if _, holds := st.(inventory.Holder); in.Holds && !holds {
			t.Errorf("%s: the registry says it takes part in holds, but built a %T, no inventory.Holder", in.Name, st)
		}
		if locked && l.Fencing() != in.Fenced {
			t.Errorf("%s: fencing %v, want %v", in.Name, l.Fencing(), in.Fenced)
		}
		if in.Name == strategy.RedisStock {
			if _, err := Build(in, Deps{Store: s}); !errors.Is(err, ErrNoRedis) {
				t.Errorf("%s: built without Redis: %v", in.Name, err)
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
