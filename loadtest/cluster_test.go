package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stocklock/stocklock/internal/testskip"
	"github.com/stocklock/stocklock/loadtest/harness"
)

// needCluster skips a test without redis-server and redis-cli on PATH,
// which devstore needs to start a local six-node Redis Cluster.
func needCluster(t *testing.T) {
	t.Helper()
	testskip.Long(t, "builds the service and starts a six-node Redis Cluster and two replica processes")
	requireTools(t, "redis-server", "redis-cli")
}

func TestRedisClusterConfig(t *testing.T) {
	bad := []struct {
		args []string
		want string
	}{
		{[]string{"--redis-cluster", "--replicas", "http://127.0.0.1:1"}, "--redis-cluster applies only to the replicas the harness starts"},
		{[]string{"faults", "redis-failover,redis-clock"}, "loadtest faults redis-clock needs one redis-server"},
		{[]string{"faults", "--redis-cluster", "redis-restart"}, "loadtest faults redis-restart needs one redis-server"},
	}
	for _, b := range bad {
		_, err := ParseConfig(b.args, noEnv, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%v: error %v, want %q", b.args, err, b.want)
		}
	}
	cfg, err := ParseConfig([]string{"faults", "redis-failover"}, noEnv, &bytes.Buffer{})
	if cluster := harness.EnvOptions(cfg.Config, "", nil).RedisCluster; err != nil || !cluster {
		t.Errorf("faults redis-failover: %v, cluster %v; want it to imply the cluster", err, cluster)
	}
}

// testRedisFailoverShort is the short form of the redis-failover drills:
// on a local six-node Redis Cluster, the master serving the hot sku's
// lock key is killed while a replica of the service holds the lock, and
// its replica is promoted: one in sync, and one cut off and waiting for a
// full resync (with fencing on and off). With fencing on nothing may be
// oversold or lost, tokens keep increasing, the note must say which
// master died and which replica took over, and sales must resume. 8 s per
// drill (not runDrills' 4 s): the resyncing drill waits for a grant its
// replica lacks before it strikes, and the clients then need a few
// seconds to find the new master.
func testRedisFailoverShort(t *testing.T) {
	needCluster(t)
	_, rep, _ := runHarness(t, "faults", "redis-failover", "--strategies", "redis-lock", "--warmup", "1s", "--duration", "8s")
	if len(rep.Runs) != 3 {
		t.Fatalf("%d runs, want 3 (in sync; resyncing, fencing on and off)", len(rep.Runs))
	}
	for _, r := range rep.Runs {
		rec := -1.0 // sales did not resume
		if r.RecoverySeconds != nil {
			rec = *r.RecoverySeconds
		}
		t.Logf("%s: %s; 2 holders %d, fenced %d, lost %d, verdict %s, recovery %.2fs", r.Fault, r.FaultNote, r.DoubleHeld, r.Codes["503 fenced"], r.LostUpdates, r.Verdict, rec)
		if !strings.Contains(r.FaultNote, "killed Redis master 127.0.0.1:") || !strings.Contains(r.FaultNote, "took over") {
			t.Errorf("%s: the note does not say which master was killed and which replica took over: %q", r.Fault, r.FaultNote)
		}
		if strings.Contains(r.Fault, "resyncing") && !strings.Contains(r.FaultNote, "waiting for a full resync) took over") {
			t.Errorf("%s: the note does not say the replica was resyncing: %q", r.Fault, r.FaultNote)
		}
		if !r.Injected || r.RecoverySeconds == nil {
			t.Errorf("%s: injected %v, sales resumed %v", r.Fault, r.Injected, r.RecoverySeconds != nil)
		}
		if r.Demo {
			continue
		}
		checkSafeRun(t, r)
	}
}

// TestRedisClusterComparisonShort is the short comparison on a local
// six-node Redis Cluster: redis-lock over 120 skus, whose lock keys must
// spread over all three masters, each master serving sales, and nothing
// oversold or lost.
func TestRedisClusterComparisonShort(t *testing.T) {
	needCluster(t)
	t.Parallel()
	_, rep, stdout := runHarness(t, "--redis-cluster", "--strategies", "redis-lock", "--skus", "120", "--stock", "5",
		"--duration", "3s", "--warmup", "1s")
	if len(rep.Runs) != 1 {
		t.Fatalf("%d runs, want 1", len(rep.Runs))
	}
	r := rep.Runs[0]
	if !strings.Contains(rep.Redis, "Redis Cluster") {
		t.Errorf("the report's Redis is %q, not a cluster", rep.Redis)
	}
	if r.Verdict != "pass" || r.Sold == 0 {
		t.Errorf("verdict %s, sold %d; %v", r.Verdict, r.Sold, r.Problems)
	}
	if len(r.SalesByShard) != 3 {
		t.Fatalf("sales by shard %v: want three masters", r.SalesByShard)
	}
	skus, sales := 0, 0
	for m, n := range r.SalesByShard {
		if n == 0 || r.SKUsByShard[m] == 0 || r.RequestsByShard[m] == 0 {
			t.Errorf("master %s: %d skus, %d requests, %d sales; want some of each", m, r.SKUsByShard[m], r.RequestsByShard[m], n)
		}
		skus += r.SKUsByShard[m]
		sales += n
	}
	if skus != 120 || sales != r.Orders {
		t.Errorf("shards hold %d skus and %d sales; want 120 and the run's %d orders", skus, sales, r.Orders)
	}
	if !strings.Contains(stdout, "3 of 3 shards sold") {
		t.Errorf("the terminal output does not show the load by master")
	}
}
