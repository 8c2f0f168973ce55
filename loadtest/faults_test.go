package main

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stocklock/stocklock/internal/testskip"
	"github.com/stocklock/stocklock/loadtest/harness"
	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/loadtest/verdict"
)

func TestFaultConfig(t *testing.T) {
	cfg, err := ParseConfig([]string{"faults", "crash"}, noEnv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Scenario.(*harness.Faults); cfg.Stock != 2000 || s.Repeat != 1 || s.FaultTTL != time.Second || s.RedisAOF != "always" {
		t.Errorf("fault defaults: stock %d, %+v", cfg.Stock, s)
	}
	if cfg, err := ParseConfig([]string{"faults", "redis-restart"}, func(k string) string {
		return map[string]string{"LOADTEST_REDIS_AOF": "everysec"}[k]
	}, &bytes.Buffer{}); err != nil || cfg.Scenario.(*harness.Faults).RedisAOF != "everysec" {
		t.Errorf("LOADTEST_REDIS_AOF=everysec: %+v, %v", cfg.Scenario, err)
	}
	bad := []struct {
		args []string
		want string
	}{
		{[]string{"--repeat", "3"}, "--repeat does not apply to loadtest compare: it belongs to loadtest faults, loadtest keyed"},
		{[]string{"faults", "crash", "--repeat", "0"}, "--repeat 0"},
		{[]string{"faults", "--fault-ttl", "1500ms", "crash"}, "whole seconds"},
		{[]string{"faults", "redis-restart", "--redis-aof", "sometimes"}, `--redis-aof "sometimes": want one of always, everysec, no`},
		{[]string{"--redis-aof", "always"}, "--redis-aof does not apply to loadtest compare"},
		{[]string{"faults", "crash", "--duration", "2s"}, "needs at least 3 × --fault-ttl"},
		{[]string{"faults", "crash", "--replicas", "http://127.0.0.1:1"}, "loadtest faults needs the replicas the harness starts"},
		{[]string{"--keyed-drill", "--faults", "crash"}, "--keyed-drill and --faults: choose one command, loadtest keyed or loadtest faults"},
		{[]string{"keyed", "--local-replicas", "3"}, "the keyed drill needs the two replicas the harness starts"},
		{[]string{"faults"}, "name the faults: loadtest faults"},
		{[]string{"faults", "crash", "pause"}, `unexpected argument "pause"`},
		{[]string{"faults", "crash", "--mixed"}, "--mixed does not apply to loadtest faults: it belongs to loadtest compare"},
	}
	for _, b := range bad {
		_, err := ParseConfig(b.args, noEnv, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%v: error %v, want %q", b.args, err, b.want)
		}
	}
}

func noEnv(string) string { return "" }

// TestFaultDrillsShort is the short form of the crash and pause drills:
// two replica processes of the real service, real SIGKILL, SIGSTOP and
// SIGCONT, the real lock servers, and the verdict that nothing was
// oversold or lost. It also checks that the report says what was done.
// Each lock runs in its own environment, alongside the others: the drills
// spend their time waiting out leases and pauses, not computing.
func TestFaultDrillsShort(t *testing.T) {
	testskip.Long(t, "builds the service and starts the stores and two replica processes")
	t.Parallel()
	for _, strategy := range []string{"mongo-lease", "redis-lock", "etcd-lock"} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			out, rep := runDrills(t, "faults", "crash,pause", "--strategies", strategy, "--warmup", "500ms")
			checkCrashAndPause(t, rep)
			if _, err := os.Stat(filepath.Join(out, report.FaultChartFile)); err != nil {
				t.Errorf("no fault chart: %v", err)
			}
		})
	}
}

// checkCrashAndPause fails t unless rep holds one crash, one pause and one
// pause with fencing off, the safe ones clean and described, and the
// demonstration flagged by the history whenever the totals show an
// anomaly.
func checkCrashAndPause(t *testing.T, rep report.Report) {
	t.Helper()
	seen := map[string]int{}
	flagged := 0
	for _, r := range rep.Runs {
		seen[r.Fault]++
		if r.Demo {
			// Fencing off: its anomalies are the point, and the history
			// must show every one the totals show. A late write that
			// landed before the next sale, or that the version check
			// refused, loses nothing and may pass.
			if (r.LostUpdates > 0 || r.Oversold > 0) && r.Linearizable != "no" {
				t.Errorf("%s, %s: lost %d, oversold %d, yet linearizable %q", r.Fault, r.Strategy, r.LostUpdates, r.Oversold, r.Linearizable)
			}
			if r.Linearizable == "no" {
				flagged++
			}
			t.Logf("%s, %s: lost %d, linearizable %s %v", r.Fault, r.Strategy, r.LostUpdates, r.Linearizable, r.Conflicts)
			continue
		}
		if r.Linearizable != "yes" || r.Unrecorded != 0 {
			t.Errorf("%s, %s: linearizable %q, units taken without an order %d; %v", r.Fault, r.Strategy, r.Linearizable, r.Unrecorded, r.Conflicts)
		}
		if r.Oversold != 0 || r.LostUpdates != 0 || r.LedgerMismatch != 0 || r.Verdict != "pass" {
			t.Errorf("%s, %s: oversold %d, lost %d, ledger %d, verdict %s; %v", r.Fault, r.Strategy, r.Oversold, r.LostUpdates, r.LedgerMismatch, r.Verdict, r.Problems)
		}
		if r.Tokens != nil && !r.Tokens.OK {
			t.Errorf("%s, %s: tokens did not keep increasing: %+v", r.Fault, r.Strategy, *r.Tokens)
		}
		want := map[string]string{"crash": "kill -9 replica", "pause": "SIGSTOP replica"}[r.Fault]
		if !strings.Contains(r.FaultNote, want) {
			t.Errorf("%s, %s: note %q does not say %q", r.Fault, r.Strategy, r.FaultNote, want)
		}
		if r.Sold == 0 {
			t.Errorf("%s, %s: nothing sold", r.Fault, r.Strategy)
		}
	}
	// Since every stock write is also conditional on the version read,
	// a late write with fencing off is refused as stale and the
	// demonstration may lose nothing: then there is nothing to flag.
	t.Logf("pauses with fencing off found not linearizable: %d of %d", flagged, seen["pause, fencing off"])
	if seen["crash"] != 1 || seen["pause"] != 1 || seen["pause, fencing off"] != 1 {
		t.Errorf("drills run: %v, want a crash, a pause and a pause with fencing off", seen)
	}
}

// runDrills runs the harness with args, 4 s per drill: see runHarness.
func runDrills(t *testing.T, args ...string) (string, report.Report) {
	t.Helper()
	dir, rep, _ := runHarness(t, append(args, "--duration", "4s")...)
	return dir, rep
}

// runHarness runs the harness on the shared stock binary with args, quiet,
// requires exit 0 and returns the output directory, the report it wrote
// and what it printed.
func runHarness(t *testing.T, args ...string) (dir string, rep report.Report, stdout string) {
	t.Helper()
	dir = t.TempDir()
	var out, errOut bytes.Buffer
	code := run(t.Context(), append(args, "--quiet", "--out", dir, "--stock-bin", stockBinary(t)), noEnv, &out, &errOut)
	t.Logf("stdout:\n%s", out.String())
	if code != exitOK {
		t.Fatalf("exit %d, want 0; stderr:\n%s", code, lastLines(errOut.String(), 40))
	}
	return dir, readReport(t, dir), out.String()
}

// readReport reads the results.json a harness run wrote to dir.
func readReport(t *testing.T, dir string) report.Report {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, report.JSONFile))
	if err != nil {
		t.Fatal(err)
	}
	var rep report.Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestLeaderKillShort is the short form of the leader-kill drill: a
// three-member embedded etcd cluster, its leader killed while a replica
// holds an etcd-lock lease under load. The lock must stay exclusive and the
// tokens (etcd revisions) keep increasing across the election.
func TestLeaderKillShort(t *testing.T) {
	testskip.Long(t, "builds the service and starts a three-member etcd cluster and two replica processes")
	t.Parallel()
	_, rep := runDrills(t, "faults", "leader-kill", "--strategies", "etcd-lock", "--warmup", "0")
	if len(rep.Runs) != 1 {
		t.Fatalf("%d runs, want 1", len(rep.Runs))
	}
	r := rep.Runs[0]
	if !strings.Contains(r.FaultNote, "the leader") || !strings.Contains(rep.Etcd, "3 members") {
		t.Errorf("the report does not say a leader of three members was killed: %q, %q", r.FaultNote, rep.Etcd)
	}
	if r.Oversold != 0 || r.LostUpdates != 0 || r.LedgerMismatch != 0 || r.Verdict != "pass" || r.Sold == 0 {
		t.Errorf("sold %d, oversold %d, lost %d, ledger %d, verdict %s; %v", r.Sold, r.Oversold, r.LostUpdates, r.LedgerMismatch, r.Verdict, r.Problems)
	}
	if r.Tokens != nil && !r.Tokens.OK {
		t.Errorf("tokens did not keep increasing across the election: %+v", *r.Tokens)
	}
}

// testRedisClockShort is the short form of the redis-clock drills: the
// redis-server's clock steps 10s forward while a replica holds the
// redis-lock (fencing on, then off) and 30s back. The forward step must
// produce a double grant (two replicas holding the lock at once, seen on
// their /healthz) in one of its two runs at least, and with fencing on
// nothing may be lost or oversold;
// across the backward step tokens keep increasing.
func testRedisClockShort(t *testing.T) {
	testskip.Long(t, "builds the service and starts a redis-server under the clock shim and two replica processes")
	requireTools(t, "gcc", "redis-server")
	_, rep := runDrills(t, "faults", "redis-clock", "--strategies", "redis-lock", "--warmup", "0")
	if len(rep.Runs) != 3 {
		t.Fatalf("%d runs, want 3", len(rep.Runs))
	}
	checkDoubleGrants(t, rep.Runs, func(r report.Run) bool { return strings.Contains(r.Fault, "+10s") })
	for _, r := range rep.Runs {
		t.Logf("%s: 2 holders %d, fenced %d, lost %d, verdict %s, tokens %+v", r.Fault, r.DoubleHeld, r.Codes["503 fenced"], r.LostUpdates, r.Verdict, r.Tokens)
		if r.Demo {
			continue
		}
		checkSafeRun(t, r)
	}
}

// requireTools skips t when a program the drill needs is not on PATH.
func requireTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			need := testskip.RedisServer // redis-server and redis-cli
			if tool == "gcc" {
				need = testskip.GCC
			}
			testskip.Missing(t, need, tool+" is not on PATH")
		}
	}
}

// checkDoubleGrants fails t unless the runs whose fault should cause a
// double grant (want says which) showed one, at least one of them, and the
// others none. Two holders seen at once by the /healthz polls are one
// proof; an update lost without fencing is the other, since only a second
// holder's write produces it. A fenced write is no proof here: a holder
// stalled past its TTL is fenced without any fault.
//
// One of them suffices because whether a given run shows the double grant
// is a race on a loaded machine: the stale holder's refresh may find its
// lease gone before the next holder is granted, and then it stops, or its
// write lands before the next grant. The drill then reports "not
// reproduced"; with fencing on and off both, one run shows it.
func checkDoubleGrants(t *testing.T, runs []report.Run, want func(report.Run) bool) {
	t.Helper()
	wanted, shown := 0, 0
	for _, r := range runs {
		switch {
		case want(r):
			wanted++
			if r.DoubleHeld > 0 || r.LostUpdates > 0 {
				shown++
			}
		case r.DoubleHeld != 0:
			// Where none should be, the polls are the judge: lost
			// updates are checkSafeRun's to report.
			t.Errorf("%s: a double grant where none should be: %d polls saw two holders", r.Fault, r.DoubleHeld)
		}
	}
	if wanted > 0 && shown == 0 {
		t.Errorf("no double grant seen in any of the %d runs that should cause one: no poll saw two holders, no update lost", wanted)
	}
}

// checkSafeRun fails t when a drill run of a safe configuration sold
// nothing, showed an anomaly or its tokens did not keep increasing.
func checkSafeRun(t *testing.T, r report.Run) {
	t.Helper()
	if r.Oversold != 0 || r.LostUpdates != 0 || r.LedgerMismatch != 0 || r.Verdict != "pass" || r.Sold == 0 {
		t.Errorf("%s: sold %d, oversold %d, lost %d, ledger %d, verdict %s; %v", r.Fault, r.Sold, r.Oversold, r.LostUpdates, r.LedgerMismatch, r.Verdict, r.Problems)
	}
	if r.Tokens == nil || !r.Tokens.OK {
		t.Errorf("%s: tokens %+v", r.Fault, r.Tokens)
	}
}

// TestKeyedDrillShort is the keyed drill with two strategies and a few
// purchases: keyed purchases retried across two replica processes while
// one is killed -9 and restarted and the other frozen past its heartbeat
// timeout. Every purchase must sell exactly once, and the report must say
// what was done and how long the purchases took to settle.
func TestKeyedDrillShort(t *testing.T) {
	testskip.Long(t, "builds the service and starts the stores and two replica processes")
	t.Parallel()
	_, rep, stdout := runHarness(t, "keyed", "--strategies", "atomic,redis-lock", "--requests", "12", "--warmup", "500ms")
	if len(rep.Keyed) != 1 {
		t.Fatalf("keyed runs: %+v, want one", rep.Keyed)
	}
	r := rep.Keyed[0]
	if !r.OK() || r.Purchases != 24 || r.Sold != 24 || r.UnitsTaken != 24 || r.LedgerOrders != 24 || r.KeysTwice != 0 {
		t.Errorf("keyed run: %+v; want 24 purchases, each sold once", r)
	}
	if len(r.Faults) != 4 || !strings.Contains(r.Faults[0], "kill -9") || !strings.Contains(r.Faults[2], "SIGSTOP") {
		t.Errorf("faults done: %q; want the kill, the restart, the freeze and the thaw", r.Faults)
	}
	if r.SettleMax <= 0 || r.SettleMax < r.SettleP50 || !strings.Contains(stdout, "settle p50") {
		t.Errorf("settle times p50 %.2fs, max %.2fs; stdout:\n%s", r.SettleP50, r.SettleMax, stdout)
	}
}

// TestNetworkDrillsShort is the short form of the network drills: two
// replica processes whose links to MongoDB, Redis and etcd go through
// Toxiproxy, struck under load by a partition of the lock holder from its
// lock store, a partition from MongoDB, added latency and connection
// resets. Every run must keep the books and its history linearizable, and
// sales must resume after each fault.
func TestNetworkDrillsShort(t *testing.T) {
	testskip.Long(t, "builds the service and starts the stores and two replica processes")
	t.Parallel()
	_, rep := runDrills(t, "faults", "network", "--strategies", "redis-lock,atomic", "--warmup", "500ms")
	seen := map[string]int{}
	for _, r := range rep.Runs {
		seen[r.Fault]++
		if r.Oversold != 0 || r.LostUpdates != 0 || r.LedgerMismatch != 0 || r.Verdict != "pass" || r.Sold == 0 {
			t.Errorf("%s, %s: sold %d, oversold %d, lost %d, ledger %d, verdict %s; %v", r.Fault, r.Strategy, r.Sold, r.Oversold, r.LostUpdates, r.LedgerMismatch, r.Verdict, r.Problems)
		}
		if r.RecoverySeconds == nil {
			t.Errorf("%s, %s: sales did not resume after the fault (%s)", r.Fault, r.Strategy, r.FaultNote)
		}
		// The fault must bite. atomic has no lock to wait for, so what it
		// sees is the network's doing: answers lost in a reset are 500
		// outcome_unknown, and latency shows in the slowest answer. A
		// partition holds every request that reaches the victim until it
		// heals; which of them lose their answers is chance: only a write
		// already sent on a pooled connection does (the heal closes it); a
		// request still dialing, or whose read the driver retries, sells
		// once the link is back, about 3 s late (in one CI run every held
		// request was one of those).
		if r.Strategy != "atomic" {
			continue
		}
		switch r.Fault {
		case "mongo partition":
			if held := 2 * time.Second; r.Codes["500 outcome_unknown"] == 0 && r.Latency.Max < float64(held.Milliseconds()) {
				t.Errorf("%s: no answer lost (codes %v) and the slowest %.0fms, want one held at least %s: the fault did not strike (%s)", r.Fault, r.Codes, r.Latency.Max, held, r.FaultNote)
			}
		case "connection resets":
			if r.Codes["500 outcome_unknown"] == 0 {
				t.Errorf("%s: no answer lost (codes %v): the fault did not strike (%s)", r.Fault, r.Codes, r.FaultNote)
			}
		case "store latency":
			if r.Latency.Max < 200 {
				t.Errorf("%s: slowest answer %.0fms, want at least the 200ms the fault adds at least", r.Fault, r.Latency.Max)
			}
		}
	}
	want := map[string]int{"lock store partition": 1, "mongo partition": 2, "store latency": 2, "connection resets": 2}
	if !maps.Equal(seen, want) {
		t.Errorf("runs by fault: %v, want %v", seen, want)
	}
}

// TestSoakShort is the 60-second form of the soak: mixed load of two
// strategies through two replicas in three segments, each struck by the
// next fault of the soak's cycle, with every replica's resources sampled.
// Every segment must keep the books, and no resource may grow without
// bound.
func TestSoakShort(t *testing.T) {
	testskip.Long(t, "builds the service and starts the stores and two replica processes")
	t.Parallel()
	dir, rep, stdout := runHarness(t, "soak", "--duration", "60s", "--strategies", "redis-lock,atomic", "--warmup", "500ms")
	if len(rep.Runs) != 3 {
		t.Fatalf("segments: %d, want 3", len(rep.Runs))
	}
	for _, r := range rep.Runs {
		if r.Oversold != 0 || r.LostUpdates != 0 || r.LedgerMismatch != 0 || r.Verdict != "pass" || r.Sold == 0 {
			t.Errorf("segment under %s: sold %d, oversold %d, lost %d, ledger %d, verdict %s; %v", r.Fault, r.Sold, r.Oversold, r.LostUpdates, r.LedgerMismatch, r.Verdict, r.Problems)
		}
	}
	if rep.Soak == nil || verdict.Judge(rep.Soak.Checks) != verdict.Passed {
		t.Fatalf("soak: %+v, want samples and no growth", rep.Soak)
	}
	byReplica := map[string]int{}
	for _, s := range rep.Soak.Samples {
		byReplica[s.Replica]++
		if s.RSS <= 0 || s.Goroutines <= 0 || s.FDs <= 0 {
			t.Errorf("sample %+v: a resource not read", s)
		}
	}
	if byReplica["a"] < 5 || byReplica["b"] < 5 {
		t.Errorf("samples by replica: %v, want several of each", byReplica)
	}
	if _, err := os.Stat(filepath.Join(dir, report.SoakChartFile)); err != nil || !strings.Contains(stdout, "grew without bound") {
		t.Errorf("soak chart: %v; stdout:\n%s", err, stdout)
	}
}

// TestBrokerDrillsShort is the short form of queued's broker drills on
// one nats-server: killed and started again (its stream in files, then in
// memory), a replica's publish acknowledgements lost (de-duplication on,
// then off), a replica cut off from it. Every run keeps the books (the one
// without de-duplication too: the consumer finds a copy sent again in the
// ledger), and sales resume after a restart.
func TestBrokerDrillsShort(t *testing.T) {
	testskip.Long(t, "builds the service and starts the stores and two replica processes")
	t.Parallel()
	_, rep, _ := runHarness(t, "faults", "nats-restart,nats-ack-loss,nats-cut", "--strategies", "queued", "--warmup", "500ms", "--duration", "6s")
	seen := map[string]int{}
	for _, r := range rep.Runs {
		seen[r.Fault]++
		if r.Oversold != 0 || r.LostUpdates != 0 || r.LedgerMismatch != 0 || r.Unrecorded != 0 || r.Linearizable != "yes" || r.Sold == 0 {
			t.Errorf("%s: sold %d, oversold %d, lost %d, ledger %d, unrecorded %d, linearizable %s, verdict %s; %v",
				r.Fault, r.Sold, r.Oversold, r.LostUpdates, r.LedgerMismatch, r.Unrecorded, r.Linearizable, r.Verdict, r.Problems)
		}
		if strings.HasPrefix(r.Fault, "nats restart") && (r.RecoverySeconds == nil || !strings.Contains(r.FaultNote, "killed the nats-server")) {
			t.Errorf("%s: sales did not resume, or the note does not say the server was killed: %q", r.Fault, r.FaultNote)
		}
		// The link faults must bite, one way or another: a buyer of the
		// victim is told the outcome is unknown (a publish never
		// acknowledged); or one waits out the fault (its answer lost, it
		// looks its order up after its 10 s wait; or its publish held
		// until the link heals); or the victim is the hot partition's
		// consumer, which keeps its lease on MongoDB and applies nothing
		// while the fault lasts, so that no sale completes for at least
		// that long (or until the attack ends).
		if cut, ok := map[string]time.Duration{"nats acks lost, dedup on": 5 * time.Second, "nats acks lost, dedup off": 5 * time.Second, "nats partition": 3 * time.Second}[r.Fault]; ok &&
			r.Codes["500 outcome_unknown"] == 0 && r.Latency.Max < float64(cut.Milliseconds()) && r.RecoverySeconds != nil && *r.RecoverySeconds < cut.Seconds() {
			t.Errorf("%s: no answer lost (codes %v), the slowest answer %.0f ms and sales stopped %.2f s, under the fault's %s: the fault did not strike (%s)",
				r.Fault, r.Codes, r.Latency.Max, *r.RecoverySeconds, cut, r.FaultNote)
		}
	}
	want := map[string]int{"nats restart, file storage": 1, "nats restart, memory storage": 1, "nats acks lost, dedup on": 1, "nats acks lost, dedup off": 1, "nats partition": 1}
	if !maps.Equal(seen, want) {
		t.Errorf("runs by fault: %v, want %v", seen, want)
	}
}

// TestNATSLeaderKillShort is the short form of nats-leader-kill: on a
// three-server JetStream cluster, the queued stream's leader killed under
// load, at R3 (sales resume on the other two) and at R1 (its one server
// gone until after the attack); the books kept in both.
func TestNATSLeaderKillShort(t *testing.T) {
	testskip.Long(t, "builds the service and starts a three-server JetStream cluster and two replica processes")
	t.Parallel()
	_, rep, _ := runHarness(t, "faults", "nats-leader-kill", "--strategies", "queued", "--warmup", "500ms", "--duration", "8s")
	if len(rep.Runs) != 2 {
		t.Fatalf("%d runs, want 2", len(rep.Runs))
	}
	for _, r := range rep.Runs {
		if r.Oversold != 0 || r.LostUpdates != 0 || r.LedgerMismatch != 0 || r.Verdict != "pass" || r.Sold == 0 || !strings.Contains(r.FaultNote, "the leader of SALES_") {
			t.Errorf("%s: sold %d, oversold %d, lost %d, ledger %d, verdict %s, note %q; %v", r.Fault, r.Sold, r.Oversold, r.LostUpdates, r.LedgerMismatch, r.Verdict, r.FaultNote, r.Problems)
		}
	}
	if r := rep.Runs[0]; r.RecoverySeconds == nil {
		t.Errorf("%s: sales did not resume on the two other servers", r.Fault)
	}
}
