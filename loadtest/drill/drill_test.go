package drill

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory/mongostore"
	"github.com/stocklock/stocklock/pkg/strategy"

	"github.com/stocklock/stocklock/loadtest/env"
)

func TestParseFaults(t *testing.T) {
	// all runs on one redis-server and one nats-server with direct
	// links: redis-failover and nats-leader-kill need their clusters, the
	// network faults the proxies.
	network := []string{LockPartition, StorePartition, RedisPartition, Latency, Resets, NATSAckLoss, NATSCut}
	clusters := []string{RedisFailover, NATSLeaderKill}
	withoutFailover := slices.DeleteFunc(Names(), func(n string) bool { return slices.Contains(clusters, n) || slices.Contains(network, n) })
	withFailover := slices.DeleteFunc(Names(), func(n string) bool { return n == NATSLeaderKill || slices.Contains(network, n) })
	cases := []struct {
		in   string
		want []string
		err  string
	}{
		{"", nil, ""},
		{"none", nil, ""},
		{"pause,crash", []string{"crash", "pause"}, ""}, // documented order, whatever the given one
		{"store-restart", []string{"redis-restart", "mongo-restart"}, ""},
		{"all", withoutFailover, ""},
		{"crash,all,crash", withoutFailover, ""},
		{"all,redis-failover", withFailover, ""},
		{"network", network, ""},
		{"all,network,redis-failover,nats-leader-kill", Names(), ""},
		{"crash,meteor", nil, `unknown fault "meteor"`},
	}
	for _, c := range cases {
		got, err := Parse(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Parse(%q) error = %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

func TestPlan(t *testing.T) {
	var got []string
	for _, d := range Plan(Names(), []string{"redis-lock", "atomic"}) {
		got = append(got, d.Label+"/"+d.Strategy)
		if d.Strategy != "redis-lock" && d.Strategy != "atomic" {
			t.Errorf("drill %s/%s: strategy not asked for", d.Label, d.Strategy)
		}
		if d.Demo && !weakened(d.Flags.All) {
			t.Errorf("demo drill %s/%s does not turn fencing off (or redis-stock's safe rule)", d.Label, d.Strategy)
		}
	}
	want := []string{"crash/redis-lock", "crash/atomic", "pause/redis-lock", "pause/atomic", "pause, fencing off/redis-lock",
		"redis restart/redis-lock", "mongo restart/redis-lock", "mongo restart/atomic", "clock b +2s/redis-lock",
		"redis clock +10s/redis-lock", "redis clock +10s, fencing off/redis-lock", "redis clock -30s/redis-lock",
		"redis failover/redis-lock", "redis failover, replica resyncing/redis-lock", "redis failover, replica resyncing, fencing off/redis-lock",
		"lock store partition/redis-lock", "mongo partition/redis-lock", "mongo partition/atomic", "store latency/redis-lock", "store latency/atomic",
		"connection resets/redis-lock", "connection resets/atomic"}
	if !slices.Equal(got, want) {
		t.Errorf("plan:\n got %v\nwant %v", got, want)
	}
}

// TestDrillFlagsForNReplicas checks every drill's flags for 2 to 8
// replicas: a flag meant for every replica reaches every one, and a clock
// skew shifts replica b alone.
func TestDrillFlagsForNReplicas(t *testing.T) {
	for n := 2; n <= env.MaxReplicas; n++ {
		for _, d := range Plan(Names(), strategy.Names()) {
			flags := d.Flags.PerReplica(n)
			if len(flags) != n {
				t.Fatalf("%s/%s, %d replicas: flags for %d", d.Label, d.Strategy, n, len(flags))
			}
			var skewed []int
			for i, f := range flags {
				if d.Demo && !weakened(f) {
					t.Errorf("%s/%s, %d replicas: replica %s keeps fencing on: %q", d.Label, d.Strategy, n, env.ReplicaID(i), f)
				}
				if slices.ContainsFunc(f, func(s string) bool { return strings.HasPrefix(s, "--clock-offset=") }) {
					skewed = append(skewed, i)
				}
				if strings.Contains(d.Label, "allowance 3s") && !slices.Contains(f, "--lock-skew=3s") {
					t.Errorf("%s/%s, %d replicas: replica %s lacks the wide allowance: %q", d.Label, d.Strategy, n, env.ReplicaID(i), f)
				}
			}
			wantSkewed := []int(nil)
			if strings.HasPrefix(d.Label, "clock b") {
				wantSkewed = []int{1}
			}
			if !slices.Equal(skewed, wantSkewed) {
				t.Errorf("%s/%s, %d replicas: clock shifted on replicas %v, want %v", d.Label, d.Strategy, n, skewed, wantSkewed)
			}
		}
	}
	if got := (Flags{All: []string{"--lock-skew=3s"}, Odd: []string{"--clock-offset=2s"}}).String(); got != "every replica --lock-skew=3s; replica b --clock-offset=2s" {
		t.Errorf("description %q", got)
	}
}

func TestRecoveryAndTokens(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	sales := []Sale{
		{Start: at(0), End: at(100), Fence: 10},
		{Start: at(100), End: at(200), Fence: 11},
		{Start: at(900), End: at(1200), Fence: 12}, // in flight at the fault
		{Start: at(1500), End: at(2600), Fence: 14},
		{Start: at(2700), End: at(2800), Fence: 15},
	}
	ev := &Event{At: at(1000), Victim: "a"}
	// Sales end at 1200 (in flight when the fault struck), 2600, 2800:
	// the longest time without a sale after the fault is 1200..2600.
	if d, ok := Recovery(sales, ev); !ok || d != 1400*time.Millisecond {
		t.Errorf("recovery = %v, %v; want 1.4s (the gap from 1.2s to 2.6s)", d, ok)
	}
	store := &Event{At: at(1000), Healed: at(1400)}
	if d, ok := Recovery(sales[:4], store); !ok || d != 1400*time.Millisecond {
		t.Errorf("recovery = %v, %v; want 1.4s", d, ok)
	}
	// The gap that contains the fault counts from the fault, not from the
	// last sale before it.
	if d, ok := Recovery(sales[:2], &Event{At: at(150)}); !ok || d != 50*time.Millisecond {
		t.Errorf("recovery = %v, %v; want 50ms", d, ok)
	}
	if d, ok := Recovery(sales[:2], ev); ok {
		t.Errorf("no sale after the fault, yet recovery %v", d)
	}

	if tc := Tokens(sales, store); !tc.OK || tc.MaxBefore != 11 || tc.MinAfter != 14 || tc.Before != 2 || tc.After != 2 {
		t.Errorf("increasing tokens: %+v", tc)
	}
	// A token after the fault no higher than one before it: a restarted
	// lock service that counted from scratch.
	reset := append(slices.Clone(sales), Sale{Start: at(3000), End: at(3100), Fence: 3})
	if tc := Tokens(reset, store); tc.OK {
		t.Errorf("a token that went back passed: %+v", tc)
	}
	twice := append(slices.Clone(sales), Sale{Start: at(3000), End: at(3100), Fence: 15})
	if tc := Tokens(twice, store); tc.OK || tc.Reused != 1 {
		t.Errorf("a token used for two sales passed: %+v", tc)
	}
	// Without an injected fault (clock skew) only reuse is checked.
	if tc := Tokens(reset, nil); !tc.OK || tc.Before != 0 || tc.After != 0 {
		t.Errorf("no fault, no reuse: %+v", tc)
	}
	if tc := Tokens(twice, nil); tc.OK || tc.Reused != 1 {
		t.Errorf("no fault, a token used twice passed: %+v", tc)
	}
}

// TestDoubles: a lone poll with two holders is a handoff, not a double
// grant; runs of two or more count whole.
func TestDoubles(t *testing.T) {
	var d doubles
	for _, held := range []int{1, 2, 1, 0, 2, 1, 2, 2, 2, 1, 2, 3, 0} {
		d.poll(held)
	}
	if d.n != 5 {
		t.Errorf("counted %d polls, want 5 (a run of 3 and a run of 2; the lone ones are handoffs)", d.n)
	}
}

// weakened reports whether flags turn a safety off: fencing,
// redis-stock's acknowledgement after MongoDB, or queued's message ids.
func weakened(flags []string) bool {
	return slices.Contains(flags, "--fencing=false") || slices.Contains(flags, "--redis-stock-ack=redis") || slices.Contains(flags, "--queued-dedup=0")
}

// TestPlanQueued: queued meets every broker fault, with each mitigation
// and without it (memory storage, de-duplication off, R1), and no other
// strategy meets them; only de-duplication off is judged as a
// demonstration (the others cost availability, not the books). The
// leader kill finds the stream by the name the replicas give it.
func TestPlanQueued(t *testing.T) {
	broker := []string{NATSRestart, NATSAckLoss, NATSCut, QueuedLag, NATSLeaderKill}
	var got []string
	for _, d := range Plan(broker, strategy.Names()) {
		if d.Strategy != strategy.Queued {
			t.Errorf("%s/%s: a broker fault for another strategy", d.Label, d.Strategy)
		}
		got = append(got, fmt.Sprintf("%s: %s %v demo=%v", d.Fault, d.Label, d.Flags.All, d.Demo))
	}
	want := []string{
		"nats-restart: nats restart, file storage [] demo=false",
		"nats-restart: nats restart, memory storage [--queued-storage=memory] demo=false",
		"nats-ack-loss: nats acks lost, dedup on [] demo=false",
		"nats-ack-loss: nats acks lost, dedup off [--queued-dedup=0] demo=true",
		"nats-cut: nats partition [] demo=false",
		"queued-lag: slow consumer +6s a batch [--queued-apply-delay=6s] demo=false",
		"nats-leader-kill: nats stream leader kill, R3 [--queued-replicas=3] demo=false",
		"nats-leader-kill: nats stream server kill, R1 [--queued-replicas=1] demo=false",
	}
	if !slices.Equal(got, want) {
		t.Errorf("queued's broker drills:\n got %q\nwant %q", got, want)
	}
	if !NeedsNATSCluster([]string{NATSLeaderKill}) || NeedsNATSCluster([]string{NATSRestart}) || !NeedsNetwork([]string{NATSCut}) || !NeedsNetwork([]string{NATSAckLoss}) {
		t.Error("nats-leader-kill needs the cluster, nats-cut and nats-ack-loss the proxies")
	}
	if got, want := mongostore.QueuedStream(env.DB, mongostore.QueuedOptions{Replicas: 3}), mongostore.QueuedStream(env.DB, mongostore.QueuedOptions{}); got == want {
		t.Errorf("the R3 stream and the R1 stream are both %s", got)
	}
}

// TestPlanRedisStock: redis-stock meets every fault that strikes its
// Redis (restart, failover, partition, latency, resets) with its safe
// rule; its demo rule (acknowledge after Redis) is a demonstration, and so
// is the demo rule with the mitigation of the gap the fault opens (an
// append-only file for a restart, WAIT 1 for a failover): the
// write-behind's own gaps remain.
func TestPlanRedisStock(t *testing.T) {
	type row struct {
		fault, label string
		demo         bool
		flags        string
	}
	var got []row
	for _, d := range Plan(Names(), []string{strategy.RedisStock}) {
		switch d.Fault {
		case RedisRestart, RedisFailover, RedisPartition, Latency, Resets:
			got = append(got, row{d.Fault, d.Label, d.Demo, strings.Join(d.Flags.All, " ")})
		}
		if d.Strategy != strategy.RedisStock {
			t.Errorf("%s/%s: strategy not asked for", d.Label, d.Strategy)
		}
	}
	want := []row{
		{RedisRestart, "redis restart", false, ""},
		{RedisRestart, "redis restart, ack after redis", true, AckAfterRedis},
		{RedisRestart, "redis kill -9 on its AOF, ack after redis", true, AckAfterRedis},
		{RedisFailover, "redis failover", false, ""},
		{RedisFailover, "redis failover, replica resyncing", false, ""},
		{RedisFailover, "redis failover, replica resyncing, ack after redis", true, AckAfterRedis},
		{RedisFailover, "redis failover, replica resyncing, ack after redis + WAIT 1", true, AckAfterRedis + " --redis-stock-wait=200ms"},
		{RedisPartition, "redis partition", false, ""},
		{Latency, "store latency", false, ""},
		{Resets, "connection resets", false, ""},
	}
	if !slices.Equal(got, want) {
		t.Errorf("redis-stock's Redis drills:\n got %v\nwant %v", got, want)
	}
	// The failover finds redis-stock's master by its stock's key, the
	// lock strategies' by their lock's.
	stockKey := mongostore.RedisStockKey(mongostore.RedisStockKeyPrefix(env.DB), "sku-1")
	if hotKey(strategy.RedisStock, "sku-1") != stockKey || !strings.Contains(stockKey, "{sku-1}") {
		t.Errorf("redis-stock's failover key %q, want its stock hash %q with the hash tag {sku-1}", hotKey(strategy.RedisStock, "sku-1"), stockKey)
	}
	if hotKey(strategy.RedisLock, "sku-1") != RedisLockKey("sku-1") {
		t.Errorf("redis-lock's failover key %q, want its lock %q", hotKey(strategy.RedisLock, "sku-1"), RedisLockKey("sku-1"))
	}
}
