package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestRedlockPartitionShort is the short form of the redlock-partition
// drills on five real redis-servers. Kleppmann's scenario (a grant on
// servers 0-2, then 0 and 1 stopped and server 2's clock stepped past the
// TTL) must produce a double grant, which with fencing on costs nothing:
// no anomaly, tokens increasing. Two servers stopped alone must not.
func TestRedlockPartitionShort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the service and starts five redis-servers under the clock shim and two replica processes")
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("the clock shim needs gcc (apt-get install gcc)")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("the redlock drills need redis-server on PATH")
	}
	_, rep := runDrills(t, "--faults", "redlock-partition", "--strategies", "redlock", "--warmup", "0")
	if len(rep.Runs) != 3 {
		t.Fatalf("%d runs, want 3", len(rep.Runs))
	}
	for _, r := range rep.Runs {
		t.Logf("%s: 2 holders %d, fenced %d, lost %d, oversold %d, verdict %s, tokens %+v; %s",
			r.Fault, r.DoubleHeld, r.Codes["503 fenced"], r.LostUpdates, r.Oversold, r.Verdict, r.Tokens, r.FaultNote)
		kleppmann := strings.Contains(r.Fault, "clock")
		if kleppmann && r.DoubleHeld == 0 {
			t.Errorf("%s: no double grant seen", r.Fault)
		}
		if !kleppmann && r.DoubleHeld != 0 {
			t.Errorf("%s: a double grant with only a minority of the servers down: %d polls", r.Fault, r.DoubleHeld)
		}
		if r.Demo {
			continue
		}
		if r.Oversold != 0 || r.LostUpdates != 0 || r.LedgerMismatch != 0 || r.Verdict != "pass" || r.Sold == 0 {
			t.Errorf("%s: sold %d, oversold %d, lost %d, ledger %d, verdict %s; %v", r.Fault, r.Sold, r.Oversold, r.LostUpdates, r.LedgerMismatch, r.Verdict, r.Problems)
		}
		if r.Tokens == nil || !r.Tokens.OK {
			t.Errorf("%s: tokens %+v", r.Fault, r.Tokens)
		}
	}
}
