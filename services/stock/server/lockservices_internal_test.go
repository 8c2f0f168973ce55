package server

import (
	"testing"

	"github.com/stocklock/stocklock/pkg/strategy"
)

// TestLockServicesWired: every lock service of the registry has its
// wiring here, and the table wires nothing the registry lacks.
func TestLockServicesWired(t *testing.T) {
	for _, svc := range strategy.LockServices() {
		w, ok := lockServices[svc.Name]
		if !ok || w.Backend == nil {
			t.Errorf("lock service %s has no wiring in lockServices", svc.Name)
		}
		if (w.Configured == nil) != (w.Needs == "") {
			t.Errorf("lock service %s: Configured and Needs must come together (Needs names what Configured checks)", svc.Name)
		}
	}
	for name := range lockServices {
		if _, ok := strategy.LookupLockService(name); !ok {
			t.Errorf("lockServices wires %q, which the registry does not have", name)
		}
	}
}
