package main

import (
	"strings"
	"testing"

	"github.com/stocklock/stocklock/internal/testskip"
	"github.com/stocklock/stocklock/loadtest/report"
)

// testRedlockPartitionShort is the short form of the redlock-partition
// drills on five real redis-servers. Kleppmann's scenario (a grant on
// servers 0-2, then 0 and 1 stopped and server 2's clock stepped past the
// TTL) must produce a double grant, in one of its two runs (fencing on and
// off) at least, which with fencing on costs nothing: no anomaly, tokens
// increasing. Two servers stopped alone must not.
func testRedlockPartitionShort(t *testing.T) {
	testskip.Long(t, "builds the service and starts five redis-servers under the clock shim and two replica processes")
	requireTools(t, "gcc", "redis-server")
	_, rep := runDrills(t, "faults", "redlock-partition", "--strategies", "redlock", "--warmup", "0")
	if len(rep.Runs) != 3 {
		t.Fatalf("%d runs, want 3", len(rep.Runs))
	}
	checkDoubleGrants(t, rep.Runs, func(r report.Run) bool { return strings.Contains(r.Fault, "clock") })
	for _, r := range rep.Runs {
		t.Logf("%s: 2 holders %d, fenced %d, lost %d, oversold %d, verdict %s, tokens %+v; %s",
			r.Fault, r.DoubleHeld, r.Codes["503 fenced"], r.LostUpdates, r.Oversold, r.Verdict, r.Tokens, r.FaultNote)
		if r.Demo {
			continue
		}
		checkSafeRun(t, r)
	}
}
