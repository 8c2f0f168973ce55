package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/pkg/inventory"
)

func TestParseFaults(t *testing.T) {
	cases := []struct {
		in   string
		want []string
		err  string
	}{
		{"", nil, ""},
		{"none", nil, ""},
		{"pause,crash", []string{"crash", "pause"}, ""}, // documented order, whatever the given one
		{"store-restart", []string{"redis-restart", "mongo-restart"}, ""},
		{"all", faultNames, ""},
		{"crash,all,crash", faultNames, ""},
		{"crash,meteor", nil, `unknown fault "meteor"`},
	}
	for _, c := range cases {
		got, err := parseFaults(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("parseFaults(%q) error = %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("parseFaults(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

func TestFaultConfig(t *testing.T) {
	cfg, err := ParseConfig([]string{"--faults", "crash"}, noEnv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Stock != 2000 || cfg.Repeat != 1 || cfg.FaultTTL != time.Second {
		t.Errorf("fault defaults: stock %d, repeat %d, ttl %s", cfg.Stock, cfg.Repeat, cfg.FaultTTL)
	}
	bad := []struct {
		args []string
		want string
	}{
		{[]string{"--repeat", "3"}, "--repeat applies only to fault drills"},
		{[]string{"--faults", "crash", "--repeat", "0"}, "--repeat 0"},
		{[]string{"--faults", "crash", "--fault-ttl", "1500ms"}, "whole seconds"},
		{[]string{"--faults", "crash", "--duration", "2s"}, "needs at least 3 × --fault-ttl"},
		{[]string{"--faults", "crash", "--replicas", "http://127.0.0.1:1"}, "--faults needs the replicas the harness starts"},
	}
	for _, b := range bad {
		_, err := ParseConfig(b.args, noEnv, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%v: error %v, want %q", b.args, err, b.want)
		}
	}
}

func noEnv(string) string { return "" }

func TestPlan(t *testing.T) {
	cfg := Config{Faults: faultNames, Strategies: []string{"redis-lock", "atomic"}}
	var got []string
	for _, d := range plan(cfg) {
		got = append(got, d.label+"/"+d.strategy)
		if d.strategy != "redis-lock" && d.strategy != "atomic" {
			t.Errorf("drill %s/%s: strategy not asked for", d.label, d.strategy)
		}
		if d.demo && !slices.Contains(d.flags.all, "--fencing=false") {
			t.Errorf("demo drill %s/%s does not turn fencing off", d.label, d.strategy)
		}
	}
	want := []string{"crash/redis-lock", "crash/atomic", "pause/redis-lock", "pause/atomic", "pause, fencing off/redis-lock",
		"redis restart/redis-lock", "mongo restart/redis-lock", "mongo restart/atomic", "clock b +2s/redis-lock"}
	if !slices.Equal(got, want) {
		t.Errorf("plan:\n got %v\nwant %v", got, want)
	}
}

// TestDrillFlagsForNReplicas checks every drill's flags for 2 to 8
// replicas: a flag meant for every replica reaches every one, and a clock
// skew shifts replica b alone.
func TestDrillFlagsForNReplicas(t *testing.T) {
	cfg := Config{Faults: faultNames, Strategies: inventory.Names()}
	for n := 2; n <= maxLocalReplicas; n++ {
		for _, d := range plan(cfg) {
			flags := d.flags.perReplica(n)
			if len(flags) != n {
				t.Fatalf("%s/%s, %d replicas: flags for %d", d.label, d.strategy, n, len(flags))
			}
			var skewed []int
			for i, f := range flags {
				if d.demo && !slices.Contains(f, "--fencing=false") {
					t.Errorf("%s/%s, %d replicas: replica %s keeps fencing on: %q", d.label, d.strategy, n, replicaID(i), f)
				}
				if slices.ContainsFunc(f, func(s string) bool { return strings.HasPrefix(s, "--clock-offset=") }) {
					skewed = append(skewed, i)
				}
				if strings.Contains(d.label, "allowance 3s") && !slices.Contains(f, "--lock-skew=3s") {
					t.Errorf("%s/%s, %d replicas: replica %s lacks the wide allowance: %q", d.label, d.strategy, n, replicaID(i), f)
				}
			}
			wantSkewed := []int(nil)
			if strings.HasPrefix(d.label, "clock b") {
				wantSkewed = []int{1}
			}
			if !slices.Equal(skewed, wantSkewed) {
				t.Errorf("%s/%s, %d replicas: clock shifted on replicas %v, want %v", d.label, d.strategy, n, skewed, wantSkewed)
			}
		}
	}
	if got := (drillFlags{all: []string{"--lock-skew=3s"}, odd: []string{"--clock-offset=2s"}}).String(); got != "every replica --lock-skew=3s; replica b --clock-offset=2s" {
		t.Errorf("description %q", got)
	}
}

func TestRecoveryAndTokens(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	sales := []sale{
		{start: at(0), end: at(100), replica: "a", fence: 10},
		{start: at(100), end: at(200), replica: "b", fence: 11},
		{start: at(900), end: at(1200), replica: "a", fence: 12}, // in flight at the fault, on the victim
		{start: at(1500), end: at(2600), replica: "b", fence: 14},
		{start: at(2700), end: at(2800), replica: "a", fence: 15},
	}
	ev := &faultEvent{At: at(1000), Victim: "a"}
	// Sales end at 1200 (in flight when the fault struck), 2600, 2800:
	// the longest time without a sale after the fault is 1200..2600.
	if d, ok := recovery(sales, ev); !ok || d != 1400*time.Millisecond {
		t.Errorf("recovery = %v, %v; want 1.4s (the gap from 1.2s to 2.6s)", d, ok)
	}
	store := &faultEvent{At: at(1000), Healed: at(1400)}
	if d, ok := recovery(sales[:4], store); !ok || d != 1400*time.Millisecond {
		t.Errorf("recovery = %v, %v; want 1.4s", d, ok)
	}
	// The gap that contains the fault counts from the fault, not from the
	// last sale before it.
	if d, ok := recovery(sales[:2], &faultEvent{At: at(150)}); !ok || d != 50*time.Millisecond {
		t.Errorf("recovery = %v, %v; want 50ms", d, ok)
	}
	if d, ok := recovery(sales[:2], ev); ok {
		t.Errorf("no sale after the fault, yet recovery %v", d)
	}

	if tc := tokenCheck(sales, store); !tc.OK || tc.MaxBefore != 11 || tc.MinAfter != 14 || tc.Before != 2 || tc.After != 2 {
		t.Errorf("increasing tokens: %+v", tc)
	}
	// A token after the fault no higher than one before it: a restarted
	// lock service that counted from scratch.
	reset := append(slices.Clone(sales), sale{start: at(3000), end: at(3100), replica: "b", fence: 3})
	if tc := tokenCheck(reset, store); tc.OK {
		t.Errorf("a token that went back passed: %+v", tc)
	}
	twice := append(slices.Clone(sales), sale{start: at(3000), end: at(3100), replica: "b", fence: 15})
	if tc := tokenCheck(twice, store); tc.OK || tc.Reused != 1 {
		t.Errorf("a token used for two sales passed: %+v", tc)
	}
	// Without an injected fault (clock skew) only reuse is checked.
	if tc := tokenCheck(reset, nil); !tc.OK || tc.Before != 0 || tc.After != 0 {
		t.Errorf("no fault, no reuse: %+v", tc)
	}
	if tc := tokenCheck(twice, nil); tc.OK || tc.Reused != 1 {
		t.Errorf("no fault, a token used twice passed: %+v", tc)
	}
}

// TestFaultDrillsShort is the short form of the crash and pause drills:
// two replica processes of the real service, real SIGKILL, SIGSTOP and
// SIGCONT, the real lock servers, and the verdict that nothing was
// oversold or lost. It also checks that the report says what was done.
func TestFaultDrillsShort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the service and starts the stores and two replica processes")
	}
	out, rep := runDrills(t, "--faults", "crash,pause", "--strategies", "mongo-lease,redis-lock,etcd-lock", "--warmup", "500ms")
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
	// Since every stock write is also conditional on the version read
	// (issue 11), a late write with fencing off is refused as stale and
	// the demonstration may lose nothing: then there is nothing to flag.
	t.Logf("pauses with fencing off found not linearizable: %d of %d", flagged, seen["pause, fencing off"])
	if seen["crash"] != 3 || seen["pause"] != 3 || seen["pause, fencing off"] != 3 {
		t.Errorf("drills run: %v, want 3 crash, 3 pause, 3 pause with fencing off", seen)
	}
	if _, err := os.Stat(filepath.Join(out, report.FaultChartFile)); err != nil {
		t.Errorf("no fault chart: %v", err)
	}
}

// runDrills runs the harness with args, 4 s per drill, requires exit 0 and
// returns the output directory and the report it wrote.
func runDrills(t *testing.T, args ...string) (string, report.Report) {
	t.Helper()
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), append(args, "--duration", "4s", "--quiet", "--out", out), noEnv, &stdout, &stderr)
	t.Logf("stdout:\n%s", stdout.String())
	if code != exitOK {
		t.Fatalf("exit %d, want 0; stderr:\n%s", code, lastLines(stderr.String(), 40))
	}
	return out, readReport(t, out)
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
	if testing.Short() {
		t.Skip("builds the service and starts a three-member etcd cluster and two replica processes")
	}
	_, rep := runDrills(t, "--faults", "leader-kill", "--strategies", "etcd-lock", "--warmup", "0")
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
