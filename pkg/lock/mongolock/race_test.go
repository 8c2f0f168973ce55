//go:build race

package mongolock_test

// raceEnabled: the race detector slows the embedded store (which runs in
// the test binary) several times over, so timing tests use longer leases.
const raceEnabled = true
