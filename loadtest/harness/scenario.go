package harness

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/stocklock/stocklock/loadtest/drill"
	"github.com/stocklock/stocklock/loadtest/env"
	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/loadtest/verdict"
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
	if drill.NeedsNATSCluster(s.Faults) && drill.NeedsNetwork(s.Faults) {
		bad("Faults %s needs a three-server NATS cluster, and the network faults one nats-server behind proxies: run them separately", drill.NATSLeaderKill)
	}
	for _, f := range []string{drill.RedisRestart, drill.RedisClock} {
		if slices.Contains(s.Faults, f) && (c.RedisCluster || drill.NeedsRedisCluster(s.Faults)) {
			bad("Faults %s needs one redis-server, and RedisCluster (or the redis-failover drill) puts the replicas on a Redis Cluster: run them separately", f)
		}
	}
}

func (s Faults) Env(c Config, o *env.Options) {
	s.Drills.Env(c, o)
	o.EtcdCluster, o.RedisClock, o.NATSCluster = drill.NeedsEtcdCluster(s.Faults), drill.NeedsRedisClock(s.Faults), drill.NeedsNATSCluster(s.Faults)
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

// soakFaults are the faults a soak cycles through, one per segment: every
// one that strikes a mixed run (a lock-store partition needs one lock).
var soakFaults = []string{drill.Crash, drill.StorePartition, drill.Latency, drill.Pause, drill.Resets, drill.MongoRestart, drill.RedisRestart}

const soakSampleEvery = 5 * time.Second

// SoakSegment is the length of a soak's segments for a soak of d: a
// minute, or a third of a shorter soak.
func SoakSegment(d time.Duration) time.Duration { return min(time.Minute, d/3) }

// Soak is steady mixed load, every safe strategy on the same skus, for
// Duration, in segments of SoakSegment: each segment is one mixed run,
// judged like any other (history, totals, ledger), with the next fault of
// soakFaults striking a quarter into it. Meanwhile it samples every
// replica's memory, goroutines, open files and sockets, and judges their
// growth (see report.JudgeSoak).
type Soak struct {
	Duration time.Duration
	Drills
}

// DefaultSoak is the soak with the command line's defaults.
func DefaultSoak() *Soak { return &Soak{Duration: 10 * time.Minute, Drills: DefaultDrills()} }

// Defaults: enough stock that a segment sells under load to its end.
func (s Soak) Defaults(c *Config) {
	c.Stock = max(2000, c.Rate*int(SoakSegment(s.Duration)/time.Second)*2)
	s.Drills.Defaults(c)
}

func (s Soak) Check(c Config, bad Problem) {
	s.check(c, bad)
	checkMixedThresholds(c, bad)
	if s.Duration < time.Minute || s.Duration > 24*time.Hour {
		bad("Duration %s: must be between 1m and 24h (a shorter soak samples too little to judge)", s.Duration)
	}
	if len(c.Replicas) > 0 || c.LocalReplicas < 2 {
		bad("the soak needs at least two replicas the harness starts (it kills, pauses and cuts them off): drop Replicas")
	}
}

func (s Soak) Env(c Config, o *env.Options) {
	s.Drills.Env(c, o)
	o.Network = true
}

func (s Soak) Run(ctx context.Context, h *Harness, rep *report.Report) error {
	seg := SoakSegment(s.Duration)
	rep.Settings.FaultTTL, rep.Settings.WriteStall = s.FaultTTL.String(), s.WriteStall.String()
	rep.Settings.Duration = seg.String()
	safe := safeOf(h.cfg.Strategies)
	h.cfg.Strategies, h.cfg.Duration, h.cfg.Requests = safe, seg, 0
	soak := &report.Soak{Duration: s.Duration.String(), Segment: seg.String(), Strategies: safe, SampleEvery: soakSampleEvery.String()}
	rep.Soak, rep.Sections = soak, append(rep.Sections, report.FaultSection, report.SoakSection)
	if err := h.warmup(ctx); err != nil {
		return err
	}
	began := time.Now()
	h.sample(ctx, began, soak)
	stopSampling := ticking(soakSampleEvery, func(final bool) {
		if !final && ctx.Err() == nil {
			h.sample(ctx, began, soak)
		}
	})
	defer func() {
		stopSampling()
		soak.Checks = report.JudgeSoak(soak.Samples)
	}()

	n := int(s.Duration / seg)
	for i := range n {
		name := soakFaults[i%len(soakFaults)]
		f, _ := drill.Lookup(name)
		d := drill.Drill{Label: name, Strategy: mixedRun, Inject: f.Inject}
		h.logf("[soak %d/%d, %s of %s] mixed %s under %s", i+1, n, time.Since(began).Round(time.Second), s.Duration, strings.Join(safe, ", "), name)
		run, err := h.runStrategy(ctx, mixedRun, runOpts{drill: &d, repeat: i + 1, drills: s.Drills})
		if err != nil {
			return err
		}
		h.logf("  → sold %d, oversold %d, lost updates %d, ledger mismatch %d; %s", run.Sold, run.Oversold, run.LostUpdates, run.LedgerMismatch, run.Verdict)
		rep.Runs = append(rep.Runs, run)
	}
	return nil
}

func (h *Harness) sample(ctx context.Context, began time.Time, soak *report.Soak) {
	for _, p := range h.env.Procs() {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		text, err := h.probe.At(p.Base).Metrics(cctx)
		cancel()
		if err != nil {
			continue // down (a crash drill): no sample
		}
		s, fams := report.SoakSample{Replica: p.ID, At: time.Since(began).Seconds()}, families(text)
		s.RSS = metricValue(fams, "process_resident_memory_bytes") / (1 << 20)
		s.Goroutines = metricValue(fams, "go_goroutines")
		s.FDs = metricValue(fams, "process_open_fds")
		s.Started = metricValue(fams, "process_start_time_seconds")
		s.Sockets = countSockets(p.Pid)
		soak.Samples = append(soak.Samples, s)
	}
}

// metricValue is the value of an unlabelled gauge, 0 when it is missing.
func metricValue(fams map[string]*dto.MetricFamily, name string) float64 {
	for _, m := range fams[name].GetMetric() {
		return m.GetGauge().GetValue()
	}
	return 0
}

// countSockets counts the sockets among pid's open files (Linux; -1
// where /proc cannot tell).
func countSockets(pid int) float64 {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return -1
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return float64(n)
}

// The capacity sweep's defaults.
const (
	capacityFirstRate = 50
	// capacityKeep is how far below the offered rate the sales may fall
	// before the step counts as saturated.
	capacityKeep = 0.9
)

// Capacity is the capacity sweep: each strategy at a doubling offered
// rate until a step passes the limits, at each replica count.
type Capacity struct {
	P99      time.Duration // a step's p99 limit
	Errors   float64       // a step's limit on errors and 503s, a share of its requests
	MaxRate  int           // the highest rate offered
	Replicas []int         // replica counts to sweep; none: LocalReplicas (or Config.Replicas)
	PastKnee bool          // go on past each strategy's knee with the open model (pastknee.go)
}

// DefaultCapacity is the sweep with the command line's defaults.
func DefaultCapacity() *Capacity {
	return &Capacity{P99: 500 * time.Millisecond, Errors: 0.01, MaxRate: 3200}
}

// Defaults: short steps, and neither the read-modify-write delay nor
// reads, which would cap what the sweep measures.
func (Capacity) Defaults(c *Config) { c.Duration, c.RMWDelay, c.ReadEvery = 3*time.Second, 0, 0 }

func (Capacity) Env(Config, *env.Options) {}

func (s Capacity) Check(c Config, bad Problem) {
	between(bad, "Capacity.P99", s.P99, time.Millisecond, time.Minute)
	if s.Errors < 0 || s.Errors >= 1 {
		bad("Capacity.Errors %g: must be at least 0 and below 1", s.Errors)
	}
	between(bad, "Capacity.MaxRate", s.MaxRate, 50, maxRate)
	if c.Requests > 0 {
		bad("Requests %d: capacity steps are bounded by Duration alone", c.Requests)
	}
	for _, n := range s.Replicas {
		between(bad, "Capacity.Replicas", n, 1, maxLocalReplicas)
	}
	if len(s.Replicas) > 0 && len(c.Replicas) > 0 {
		bad("Capacity.Replicas needs the replicas the harness starts (it scales them): drop Replicas")
	}
}

// Run offers each strategy at each replica count 50 req/s, then twice as
// much at every step, each on fresh skus, until a step passes the limits
// (p99, errors and 503s, sales behind the offered rate) or MaxRate.
func (s Capacity) Run(ctx context.Context, h *Harness, rep *report.Report) error {
	rep.Settings.CapacityLimit = fmt.Sprintf("p99 at most %s, errors and 503s at most %.0f%% of the requests, sales at least %.0f%% of the offered rate",
		s.P99, 100*s.Errors, 100*capacityKeep)
	rep.Sections = append(rep.Sections, report.CapacitySection)
	if s.PastKnee {
		rep.Sections = append(rep.Sections, report.PastKneeSection)
	}
	counts := s.Replicas
	if len(counts) == 0 {
		counts = []int{len(h.replicas)}
	}
	for _, n := range counts {
		if n != len(h.replicas) {
			if h.env == nil {
				return fmt.Errorf("capacity with %d replicas: the harness can change the replica count only of replicas it starts", n)
			}
			if err := h.env.Scale(ctx, n); err != nil {
				return err
			}
			h.use(h.env.Bases(), env.ReplicaID)
		}
		if err := h.warmup(ctx); err != nil {
			return err
		}
		for _, st := range h.cfg.Strategies {
			for step, rate := 1, capacityFirstRate; rate <= s.MaxRate; step, rate = step+1, rate*2 {
				run, err := h.capacityStep(ctx, s, st, step, rate)
				if err != nil {
					return err
				}
				rep.Runs = append(rep.Runs, run)
				if run.Saturated != "" {
					break
				}
			}
			if s.PastKnee {
				if err := s.pastKnee(ctx, h, st, rep); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (h *Harness) capacityStep(ctx context.Context, s Capacity, strategy string, step, rate int) (report.Run, error) {
	saved := h.cfg
	defer func() { h.cfg = saved }()
	h.cfg.Rate = max(rate, len(h.replicas))
	// Every sku can take the whole step's requests: the sweep measures
	// selling, not selling out.
	h.cfg.Stock = min(MaxStock, int(float64(rate)*h.cfg.Duration.Seconds()*2)+10)
	h.logf("[capacity] %s on %d replicas, step %d: %d req/s for %s", strategy, len(h.replicas), step, rate, h.cfg.Duration)
	steps := scrape(ctx, h, parseSaleSteps)
	run, err := h.runStrategy(ctx, strategy, runOpts{step: true})
	if err != nil {
		return run, err
	}
	saleBound(&run, steps, scrape(ctx, h, parseSaleSteps))
	run.CapacityStep, run.ReplicaCount = step, len(h.replicas)
	run.Saturated = limits(&run, s)
	note := "" // the step's bound and the limit it passed, if any
	if run.BoundPerSec != nil {
		note = fmt.Sprintf(", bound %s sales/s (%s of it; %s)", run.BoundText(), run.BoundShare(), run.StepsText())
	}
	if run.Saturated != "" {
		note += "; past the limits: " + run.Saturated
	}
	h.logf("  → %d req/s offered: %.1f sales/s, p99 %s, errors and 503s %d%s", rate, run.SalesPerSec, report.Ms(run.Latency.P99), run.Errors()+run.Unavailable, note)
	return run, nil
}

// limits are a step's limit checks, appended to its checks; it returns
// how the step passed the first it failed ("" if none).
func limits(r *report.Run, c Capacity) string {
	bad := r.Errors() + r.Unavailable
	past := ""
	for _, l := range []struct {
		check verdict.Check
		why   string
	}{
		{verdict.Check{Name: "answered", Observed: fmt.Sprint(r.Requests), Bound: "> 0", Pass: r.Requests > 0}, "no request was answered"},
		{verdict.Check{Name: "p99", Observed: report.Ms(r.Latency.P99), Bound: "<= " + c.P99.String(), Pass: r.Latency.P99 <= float64(c.P99)/float64(time.Millisecond)},
			fmt.Sprintf("p99 %s over %s", report.Ms(r.Latency.P99), c.P99)},
		{verdict.Check{Name: "errors and 503s", Observed: fmt.Sprintf("%d of %d", bad, r.Requests), Bound: fmt.Sprintf("<= %g%%", 100*c.Errors), Pass: float64(bad) <= c.Errors*float64(r.Requests)},
			fmt.Sprintf("%d of %d requests were errors or 503s", bad, r.Requests)},
		{verdict.Check{Name: "sales_per_s", Observed: fmt.Sprintf("%.1f", r.SalesPerSec), Bound: fmt.Sprintf(">= %.0f%% of %d", 100*capacityKeep, r.TargetRate), Pass: r.SalesPerSec >= capacityKeep*float64(r.TargetRate)},
			fmt.Sprintf("%.1f sales/s fell behind the offered %d", r.SalesPerSec, r.TargetRate)},
	} {
		l.check.Kind = verdict.Limit
		r.Checks = append(r.Checks, l.check)
		if !l.check.Pass && past == "" {
			past = l.why
		}
	}
	return past
}

// notChecked is the linearizability of a run whose history is not checked:
// a capacity step's thousands of operations on one sku would cost the
// checker more than the step.
const notChecked = "not checked"
