package mongostore

import (
	"errors"
	"testing"

	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/pkg/strategy"

	"github.com/stocklock/stocklock/pkg/lock"
)

// TestRegistry: every strategy of the registry (pkg/strategy, whose own
// TestRegistry checks names and docs pages) builds from a replica's
// dependencies into what its Info says, and a lock strategy refuses to
// build without its lock.
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
		l, locked := st.(*Locked)
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
