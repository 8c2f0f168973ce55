package inventory

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stocklock/stocklock/pkg/strategy"

	"github.com/stocklock/stocklock/pkg/lock"
)

// TestRegistry: every strategy of the registry has a unique name and a
// docs page that exists, and builds from a replica's dependencies into what
// its Info says; Names and Lookup agree with the registry.
func TestRegistry(t *testing.T) {
	s := testStore(t)
	lockers := map[string]*lock.Locker{}
	for _, svc := range strategy.LockServices() {
		lockers[svc.Name] = localLocker(t)
	}
	deps := Deps{Store: s, Lockers: lockers, Fencing: true}
	seen := map[string]bool{}
	for i, in := range strategy.All() {
		if in.Name == "" || seen[in.Name] || strategy.Names()[i] != in.Name {
			t.Errorf("entry %d: name %q empty, repeated or out of Names() order", i, in.Name)
		}
		seen[in.Name] = true
		if got, ok := strategy.Lookup(in.Name); !ok || got.Name != in.Name {
			t.Errorf("Lookup(%q) = %v, %v", in.Name, got.Name, ok)
		}
		if _, err := os.Stat(filepath.Join("..", "..", "docs", in.Doc)); err != nil {
			t.Errorf("%s: docs page %q: %v", in.Name, in.Doc, err)
		}
		st, err := Build(in, deps)
		if err != nil || st.Name() != in.Name {
			t.Fatalf("%s: Build = %v, %v", in.Name, st, err)
		}
		l, locked := st.(*Locked)
		if locked != (in.Lock != strategy.LockNone) {
			t.Errorf("%s: lock service %q, but built a %T", in.Name, in.Lock, st)
		}
		if locked && l.Fencing() != in.Fenced {
			t.Errorf("%s: fencing %v, want %v", in.Name, l.Fencing(), in.Fenced)
		}
		if in.Lock != strategy.LockNone {
			missing := Deps{Store: s, Lockers: map[string]*lock.Locker{}}
			if _, err := Build(in, missing); err == nil {
				t.Errorf("%s: built without its %s lock", in.Name, in.Lock)
			}
		}
	}
	if _, ok := strategy.Lookup("nope"); ok {
		t.Error("Lookup of an unknown name succeeded")
	}
}
