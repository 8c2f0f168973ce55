package harness

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stocklock/stocklock/loadtest/drill"
	"github.com/stocklock/stocklock/loadtest/env"
	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// Scenario is what a harness run does once its replicas are ready: the
// comparison (Compare), the fault drills (Faults), a capacity sweep
// (Capacity), the soak (Soak), the keyed drill (Keyed), or a program's
// own. Each is a value that carries its own options; Config holds the
// settings they share.
type Scenario interface {
	// Defaults sets the shared settings of c that the scenario wants
	// otherwise than DefaultConfig, or that follow from others (a soak's
	// stock from the rate). It overwrites them: start from Defaults(s)
	// and change what you want after; a setting that follows from one
	// you changed, set yourself (the command line calls it again for the
	// settings no flag set).
	Defaults(c *Config)
	// Check reports each problem of its options, or of c with it.
	Check(c Config, bad Problem)
	// Env sets what the environment the harness starts needs for it.
	Env(c Config, o *env.Options)
	// Run runs it on h's ready replicas, adding its runs, its settings
	// and its sections to rep.
	Run(ctx context.Context, h *Harness, rep *report.Report) error
}

// Defaults is DefaultConfig for scenario s: a run of s with the defaults
// the command line shows in its --help.
func Defaults(s Scenario) Config {
	c := DefaultConfig()
	c.Scenario = s
	s.Defaults(&c)
	return c
}

func (c Config) scenario() Scenario {
	if c.Scenario == nil {
		return DefaultCompare()
	}
	return c.Scenario
}

// Drills are the settings of the scenarios that kill, pause or cut off
// the replicas, which then run with a short lock TTL and a write stall.
type Drills struct {
	FaultTTL   time.Duration // the replicas' lock TTL
	WriteStall time.Duration // the replicas' --write-stall
	// RedisAOF is the appendfsync policy of the redis-restart drill that
	// kills redis-server and starts it on its append-only file (one of
	// drill.AOFPolicies).
	RedisAOF string
}

// DefaultDrills are the drills' defaults.
func DefaultDrills() Drills {
	return Drills{FaultTTL: time.Second, WriteStall: 200 * time.Millisecond, RedisAOF: drill.AOFPolicies[0]}
}

// Defaults sets the harness's per-request timeout for replicas of these
// settings: past their own request timeout (drill.Baseline), so that
// requests still being served do not count as unanswered.
func (d Drills) Defaults(c *Config) {
	c.Timeout = max(c.Timeout, 3*d.FaultTTL+15*time.Second)
}

func (d Drills) check(c Config, bad Problem) {
	if d.FaultTTL < time.Second || d.FaultTTL > time.Minute || d.FaultTTL%time.Second != 0 {
		bad("FaultTTL %s: must be whole seconds between 1s and 1m (etcd leases are whole seconds)", d.FaultTTL)
	}
	between(bad, "WriteStall", d.WriteStall, 0, maxRMWDelay)
	if !slices.Contains(drill.AOFPolicies, d.RedisAOF) {
		bad("RedisAOF %q: want one of %s", d.RedisAOF, strings.Join(drill.AOFPolicies, ", "))
	}
	if c.Timeout <= 3*d.FaultTTL+10*time.Second {
		bad("Timeout %s: with replicas that are disturbed it must exceed their request timeout, 3 × FaultTTL + 10s (%s), or requests still being served count as unanswered", c.Timeout, 3*d.FaultTTL+10*time.Second)
	}
}

// Env runs the replicas with these settings.
func (d Drills) Env(_ Config, o *env.Options) {
	o.Flags = append(o.Flags, drill.Baseline(d.FaultTTL, d.WriteStall)...)
}

func safeOf(ss []string) []string {
	return slices.DeleteFunc(slices.Clone(ss), func(s string) bool { return !strategy.IsSafe(s) })
}

// checkMixedThresholds checks that the thresholds of a mixed run (one
// run of every strategy) bound every run.
func checkMixedThresholds(c Config, bad Problem) {
	for _, t := range c.Thresholds {
		if t.Strategy != "" {
			bad("Thresholds %s: a mixed run is one run of every strategy; give the threshold for all (%s)", t, strings.TrimPrefix(t.String(), t.Strategy+":"))
		}
	}
}

// RunStrategy runs one strategy under the config's load, as the
// comparison does, and returns the run judged: a scenario of a program's
// own is made of such runs.
func (h *Harness) RunStrategy(ctx context.Context, strategy string) (report.Run, error) {
	return h.runStrategy(ctx, strategy, runOpts{})
}

// Compare is the comparison: every strategy in turn under the same load,
// or all of them at once on shared skus.
type Compare struct {
	Mixed          bool          // every strategy at once on shared skus
	Retries        int           // re-sends of a decrement whose answer did not arrive, same Idempotency-Key
	AttemptTimeout time.Duration // each attempt's own timeout when Retries > 0
	CutRate        float64       // with Retries: the share of answers the proxy in front of the first replica cuts
}

// DefaultCompare is the comparison with the command line's defaults.
func DefaultCompare() *Compare {
	return &Compare{AttemptTimeout: 250 * time.Millisecond, CutRate: 0.1}
}

func (Compare) Defaults(*Config)         {}
func (Compare) Env(Config, *env.Options) {}

func (s Compare) Check(c Config, bad Problem) {
	between(bad, "Retries", s.Retries, 0, 10)
	if s.AttemptTimeout < time.Millisecond || s.AttemptTimeout > c.Timeout {
		bad("AttemptTimeout %s: must be between 1ms and Timeout (%s)", s.AttemptTimeout, c.Timeout)
	}
	if s.CutRate < 0 || s.CutRate >= 1 {
		bad("CutRate %g: must be at least 0 and below 1", s.CutRate)
	}
	if s.Mixed {
		if len(c.Strategies) < 2 {
			bad("Mixed needs at least two Strategies to mix")
		}
		checkMixedThresholds(c, bad)
	}
}

// Run runs every strategy in turn, or the one mixed run.
func (s Compare) Run(ctx context.Context, h *Harness, rep *report.Report) error {
	if err := h.warmup(ctx); err != nil {
		return err
	}
	strategies := h.cfg.Strategies
	if s.Mixed {
		strategies = []string{mixedRun}
	}
	for i, st := range strategies {
		h.logf("[%d/%d] %s: stock %d × %d sku, %s", i+1, len(strategies), st, h.cfg.Stock, h.cfg.SKUs, h.loadText())
		run, err := h.runStrategy(ctx, st, runOpts{retry: &s})
		if err != nil {
			return err
		}
		h.logf("  → %s: sold %d of %d, remaining %d, oversold %d, lost updates %d, ledger mismatch %d, linearizable %s (%s)",
			st, run.Sold, run.Initial, run.Remaining, run.Oversold, run.LostUpdates, run.LedgerMismatch, run.Linearizable, run.Verdict)
		rep.Runs = append(rep.Runs, run)
	}
	return nil
}

// Faults are the fault drills: each fault struck while the load runs,
// against every strategy it applies to, Repeat times.
type Faults struct {
	Faults []string // names of drill.Catalogue
	Repeat int      // runs of every drill
	Drills
}

// DefaultFaults are the fault drills of faults, with the command line's defaults.
func DefaultFaults(faults ...string) *Faults {
	return &Faults{Faults: faults, Repeat: 1, Drills: DefaultDrills()}
}

// Defaults: stock for sales before and after the fault.
func (s Faults) Defaults(c *Config) {
	c.Stock = 2000
	s.Drills.Defaults(c)
}

func (s Faults) Check(c Config, bad Problem) {
	between(bad, "Repeat", s.Repeat, 1, 100)
	s.check(c, bad)
	if len(s.Faults) == 0 {
		bad("Faults: name at least one")
	}
	if c.Requests > 0 {
		bad("Requests %d: a fault drill is bounded by Duration alone (a fault strikes a quarter into it, and a count could end the attack first)", c.Requests)
	}
	if c.Duration < 3*s.FaultTTL+time.Second {
		bad("Duration %s: a fault drill needs at least 3 × FaultTTL + 1s (%s) to see the fault and the recovery", c.Duration, 3*s.FaultTTL+time.Second)
	}
	if c.SKUs != 1 {
		bad("SKUs %d: fault drills use one hot sku, so that the lock is always contended and tokens compare (each sku's lock counts its own)", c.SKUs)
	}
	if len(c.Replicas) > 0 {
		bad("Faults needs the replicas the harness starts itself (it kills, stops and reconfigures them): drop Replicas")
	} else if c.LocalReplicas < 2 {
		bad("LocalReplicas %d: fault drills need at least 2 replicas (another replica takes the lock over from the one the fault hits, and clock skew sets replica b against the others)", c.LocalReplicas)
	}
	for _, f := range []string{drill.RedisRestart, drill.RedisClock} {
		if slices.Contains(s.Faults, f) && (c.RedisCluster || drill.NeedsRedisCluster(s.Faults)) {
			bad("Faults %s needs one redis-server, and RedisCluster (or the redis-failover drill) puts the replicas on a Redis Cluster: run them separately", f)
		}
	}
}

func (s Faults) Env(c Config, o *env.Options) {
	s.Drills.Env(c, o)
	o.EtcdCluster, o.RedisClock = drill.NeedsEtcdCluster(s.Faults), drill.NeedsRedisClock(s.Faults)
	o.Network = o.Network || drill.NeedsNetwork(s.Faults)
	o.RedisCluster = o.RedisCluster || drill.NeedsRedisCluster(s.Faults)
}

// Run runs every drill of the plan, Repeat times.
func (s Faults) Run(ctx context.Context, h *Harness, rep *report.Report) error {
	rep.Settings.Faults, rep.Settings.Repeat = s.Faults, s.Repeat
	rep.Sections = append(rep.Sections, report.FaultSection)
	rep.Settings.FaultTTL, rep.Settings.WriteStall = s.FaultTTL.String(), s.WriteStall.String()
	drills := drill.Plan(s.Faults, h.cfg.Strategies)
	if len(drills) == 0 {
		return fmt.Errorf("faults %s with --strategies %s: no drill applies", strings.Join(s.Faults, ","), strings.Join(h.cfg.Strategies, ","))
	}
	if err := h.warmup(ctx); err != nil {
		return err
	}
	total := len(drills) * s.Repeat
	began := time.Now()
	for r := 1; r <= s.Repeat; r++ {
		for i, d := range drills {
			n := (r-1)*len(drills) + i + 1 // of total
			if err := h.env.Configure(ctx, d.Flags.PerReplica(h.env.Len())); err != nil {
				return fmt.Errorf("%s, %s: reconfigure the replicas: %w", d.Label, d.Strategy, err)
			}
			eta := ""
			if n > 1 {
				per := time.Since(began) / time.Duration(n-1)
				eta = fmt.Sprintf(", about %s left", (per * time.Duration(total-n+1)).Round(time.Second))
			}
			h.logf("[%d/%d] repeat %d/%d, %s, %s: %s%s", n, total, r, s.Repeat, d.Label, d.Strategy, h.loadText(), eta)
			run, err := h.runStrategy(ctx, d.Strategy, runOpts{drill: &d, repeat: r, drills: s.Drills})
			if err != nil {
				return err
			}
			rec := "-"
			if run.RecoverySeconds != nil {
				rec = fmt.Sprintf("%.2fs", *run.RecoverySeconds)
			}
			h.logf("  → %s: %s; sold %d, oversold %d, lost updates %d, ledger mismatch %d, fenced %d, lease lost %d, sales resumed after %s (%s)",
				d.Strategy, run.FaultNote, run.Sold, run.Oversold, run.LostUpdates, run.LedgerMismatch,
				run.Codes["503 fenced"], run.Codes["503 lease_lost"], rec, run.Verdict)
			rep.Runs = append(rep.Runs, run)
		}
	}
	return nil
}
