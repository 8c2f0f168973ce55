package strategy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

// TestRegistry: names are unique, every lock service a strategy names
// exists, and every docs page exists.
func TestRegistry(t *testing.T) {
	seen := map[string]bool{}
	for _, in := range All() {
		if in.Name == "" || seen[in.Name] {
			t.Errorf("strategy %q: empty or repeated", in.Name)
		}
		seen[in.Name] = true
		if _, ok := LookupLockService(in.Lock); in.Locks() && !ok {
			t.Errorf("%s: lock service %q is not in the table", in.Name, in.Lock)
		}
		if in.Fenced && !in.Locks() {
			t.Errorf("%s: fenced without a lock", in.Name)
		}
		checkDoc(t, in.Name, in.Doc)
	}
	for _, s := range LockServices() {
		if len(Using(s.Name)) == 0 {
			t.Errorf("lock service %s: no strategy uses it", s.Name)
		}
		checkDoc(t, s.Name, s.Doc)
	}
	if !slices.Equal(Names(), NamesOf(func(Info) bool { return true })) || Known("nope") || IsSafe(Unsafe) || !IsSafe(Atomic) {
		t.Error("Names, Known or IsSafe disagree with the registry")
	}
}

func checkDoc(t *testing.T, name, doc string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join("..", "..", "docs", doc)); doc == "" || err != nil {
		t.Errorf("%s: docs page %q: %v", name, doc, err)
	}
}

// TestRegisterRefuses: a taken name, a lock service that does not exist,
// and a lock service registered twice panic and change nothing.
func TestRegisterRefuses(t *testing.T) {
	before, beforeSvcs := All(), LockServices()
	for name, f := range map[string]func(){
		"taken name":      func() { Register(Info{Name: Atomic}, nil) },
		"no such service": func() { Register(Info{Name: "x", Lock: "nowhere"}, nil) },
		"service twice":   func() { Register(Info{Name: "x", Lock: LockRedis}, &LockService{Name: LockRedis}) },
		"service not its": func() { Register(Info{Name: "x", Lock: LockRedis}, &LockService{Name: "y"}) },
		"empty name":      func() { Register(Info{}, nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Register did not panic", name)
				}
			}()
			f()
		}()
	}
	if !slices.Equal(All(), before) || !slices.Equal(LockServices(), beforeSvcs) {
		t.Error("a refused Register changed the registry")
	}
}

// TestREADMETable: the README's table of strategies lists exactly the
// registry's, in its order, and says which are safe as the registry does.
func TestREADMETable(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\| [^|]+\\| (yes|no)\\b")
	var names []string
	for _, m := range row.FindAllStringSubmatch(string(raw), -1) {
		names = append(names, m[1])
		if IsSafe(m[1]) != (m[2] == "yes") {
			t.Errorf("README: %s is safe %q, the registry says %v", m[1], m[2], IsSafe(m[1]))
		}
	}
	if !slices.Equal(names, Names()) {
		t.Errorf("README's strategy table lists %v; the registry has %v", names, Names())
	}
}
