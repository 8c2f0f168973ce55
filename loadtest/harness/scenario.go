package harness

import (
	"context"
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

// timeout is the harness's per-request timeout with replicas of these
// settings: past their own request timeout (drill.Baseline), so that
// requests still being served do not count as unanswered.
func (d Drills) timeout(c *Config) {
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

func (d Drills) env(o *env.Options) {
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
