package harness

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stocklock/stocklock/pkg/strategy"

	"github.com/stocklock/stocklock/loadtest/drill"
	"github.com/stocklock/stocklock/loadtest/env"
	"github.com/stocklock/stocklock/loadtest/report"
)

// Config is every knob of a harness run.
type Config struct {
	Replicas   []string // base URLs; empty: start LocalReplicas replicas
	Strategies []string
	Rate       int           // requests per second; 0: as fast as MaxWorkers allow
	Duration   time.Duration // per strategy; 0 with Requests > 0: until the count is sent
	Requests   int           // per strategy; 0: bounded by Duration only
	Stock      int           // per sku
	Qty        int
	SKUs       int
	Skew       float64 // 0: uniform over SKUs; > 1: Zipf exponent (sku 0 hottest)
	SKUPrefix  string  // "" : a fresh prefix per harness run
	Workers    int
	MaxWorkers int
	Timeout    time.Duration
	OutDir     string // "" : reports/<timestamp>
	Settle     time.Duration
	Warmup     time.Duration // atomic decrements on a scratch sku before the first strategy
	ReadyWait  time.Duration // how long to wait for the replicas' /readyz

	// For the replicas the harness starts itself.
	LocalReplicas int // how many; validated 1..maxLocalReplicas
	RMWDelay      time.Duration
	StockBin      string // prebuilt services/stock binary; "" : go build it
	ReplicaLog    bool   // copy the replicas' logs to stderr too
	AdminToken    string // bearer token of the replicas' stock changes (the harness resets stock with PUT)
	Quiet         bool   // no live progress line
	// RedisCluster runs the replicas on a Redis Cluster (three masters,
	// three replicas) instead of one Redis; implied by the redis-failover
	// drill.
	RedisCluster bool

	// Fault drills (replicas the harness starts only).
	Faults     []string      // faults to inject; none: the plain comparison
	Repeat     int           // runs of every drill
	FaultTTL   time.Duration // the replicas' lock TTL in fault drills
	WriteStall time.Duration // the replicas' --write-stall in fault drills
	// RedisAOF is the appendfsync policy of the redis-restart drill that
	// kills redis-server and starts it on its append-only file (one of
	// drill.AOFPolicies).
	RedisAOF string
	// KeyedDrill runs the keyed drill instead (see runKeyed), Repeat
	// times, on replicas with the fault drills' lock TTL.
	KeyedDrill bool
	// Soak runs steady mixed load for this long, a fault every segment
	// (see runSoak); 0: no soak.
	Soak time.Duration
	// Checkout runs the checkout scenario instead (see runCheckout).
	Checkout *Checkout

	// History and its check (every run).
	ReadEvery    time.Duration // a read of the stock this often during the attack; 0: none
	CheckTimeout time.Duration // the linearizability checker's time per sku
	CheckHistory string        // check this saved history file and exit; no load

	// Capacity sweep: each strategy at a doubling offered rate until a
	// step passes the limits, at each replica count.
	Capacity         bool
	CapacityP99      time.Duration // a step's p99 limit
	CapacityErrors   float64       // a step's limit on errors and 503s, a share of its requests
	CapacityMaxRate  int           // the highest rate offered
	CapacityReplicas []int         // replica counts to sweep; none: LocalReplicas (or --replicas)

	// Workloads.
	Mixed          bool          // every strategy at once on shared skus
	Retries        int           // re-sends of a decrement whose answer did not arrive, same Idempotency-Key
	AttemptTimeout time.Duration // each attempt's own timeout when Retries > 0
	CutRate        float64       // with Retries: the share of answers the proxy in front of the first replica cuts

	// Thresholds are bounds on the runs' figures; a breach fails the
	// harness run (see report.Threshold).
	Thresholds []report.Threshold
}

// Disturbs reports whether the run kills, pauses or cuts off the replicas
// (fault drills, the keyed drill, the soak), which then run with the
// drills' lock TTL and write stall.
func (c Config) Disturbs() bool { return len(c.Faults) > 0 || c.KeyedDrill || c.Soak > 0 }

// Limits that keep every run bounded in count and time.
const (
	maxRate          = 20000
	maxDuration      = 10 * time.Minute
	maxRequests      = 1_000_000
	MaxStock         = 10_000_000
	maxSKUs          = 10_000
	maxWorkers       = 4096
	maxTimeout       = 5 * time.Minute
	maxRMWDelay      = 10 * time.Second
	maxSettleTime    = time.Minute
	maxLocalReplicas = env.MaxReplicas
	// maxPrefixLen leaves room in the service's 64-byte skus for
	// "-<strategy>-<index>".
	maxPrefixLen = 40
)

// DefaultConfig is the configuration of `go run ./loadtest` with no flag:
// the defaults the command line shows in --help, and the base every other
// program that drives the harness starts from. Its Strategies are every
// strategy of the registry.
func DefaultConfig() Config {
	return Config{
		Strategies:      strategy.Names(),
		Rate:            100,
		Duration:        8 * time.Second,
		Stock:           100,
		Qty:             1,
		SKUs:            1,
		Workers:         8,
		MaxWorkers:      16,
		Timeout:         15 * time.Second,
		Settle:          300 * time.Millisecond,
		Warmup:          2 * time.Second,
		ReadyWait:       90 * time.Second,
		RMWDelay:        10 * time.Millisecond,
		LocalReplicas:   2,
		Repeat:          1,
		FaultTTL:        time.Second,
		WriteStall:      200 * time.Millisecond,
		RedisAOF:        drill.AOFPolicies[0],
		ReadEvery:       50 * time.Millisecond,
		CheckTimeout:    time.Minute,
		CapacityP99:     500 * time.Millisecond,
		CapacityErrors:  0.01,
		CapacityMaxRate: 3200,
		AttemptTimeout:  250 * time.Millisecond,
		CutRate:         0.1,
	}
}

// FieldError is a problem of one field of a Config: Format and Args, as
// for fmt.Sprintf. Format names fields by their Go names (Field first), so
// that a command line can word them as its flags without touching the
// values in Args.
type FieldError struct {
	Field  string
	Format string
	Args   []any
}

func (e *FieldError) Error() string { return fmt.Sprintf(e.Format, e.Args...) }

// Validate checks every setting and returns every problem at once, each a
// *FieldError, joined.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, &FieldError{Field: field, Format: format, Args: a})
	}
	c.checkLoad(bad)
	c.checkReplicas(bad)
	c.checkHistory(bad)
	c.checkWorkloads(bad)
	c.checkCapacity(bad)
	c.checkFaults(bad)
	c.checkThresholds(bad)
	c.checkCheckout(bad)
	return errors.Join(errs...)
}

// problem records one problem of a Config, with the field it is about.
type problem func(field, format string, a ...any)

// checkLoad checks the attack's size: rate, duration, count, stock, skus,
// workers, timeouts.
func (c Config) checkLoad(bad problem) {
	if c.Rate < 0 || c.Rate > maxRate {
		bad("Rate", "Rate %d: must be between 0 (as fast as the workers allow) and %d requests per second", c.Rate, maxRate)
	}
	if c.Duration < 0 || c.Duration > maxDuration {
		bad("Duration", "Duration %s: must be between 0 and %s", c.Duration, maxDuration)
	}
	if c.Requests < 0 || c.Requests > maxRequests {
		bad("Requests", "Requests %d: must be between 0 and %d", c.Requests, maxRequests)
	}
	if c.Duration == 0 && c.Requests == 0 {
		bad("Duration", "Duration and Requests are both 0: give a time or a count so that the attack ends")
	}
	if c.Duration > 0 && c.Duration < 100*time.Millisecond {
		bad("Duration", "Duration %s: too short to measure anything; use at least 100ms", c.Duration)
	}
	if c.Stock < 1 || c.Stock > MaxStock {
		bad("Stock", "Stock %d: must be between 1 and %d", c.Stock, MaxStock)
	}
	if c.Qty < 1 || c.Qty > c.Stock {
		bad("Qty", "Qty %d: must be between 1 and Stock (%d)", c.Qty, c.Stock)
	}
	if c.SKUs < 1 || c.SKUs > maxSKUs {
		bad("SKUs", "SKUs %d: must be between 1 and %d", c.SKUs, maxSKUs)
	}
	if c.Skew != 0 && !(c.Skew > 1 && c.Skew <= 100) {
		bad("Skew", "Skew %g: must be 0 (uniform) or a Zipf exponent above 1 (and at most 100)", c.Skew)
	}
	if c.SKUPrefix != "" && !ValidPrefix(c.SKUPrefix) {
		bad("SKUPrefix", "SKUPrefix %q: use letters, digits, '-', '_' and '.', at most %d characters (the service takes skus of up to 64)", c.SKUPrefix, maxPrefixLen)
	}
	if c.Workers < 1 || c.Workers > maxWorkers {
		bad("Workers", "Workers %d: must be between 1 and %d", c.Workers, maxWorkers)
	}
	if c.MaxWorkers < c.Workers || c.MaxWorkers > maxWorkers {
		bad("MaxWorkers", "MaxWorkers %d: must be between Workers (%d) and %d", c.MaxWorkers, c.Workers, maxWorkers)
	}
	if c.Timeout < time.Millisecond || c.Timeout > maxTimeout {
		bad("Timeout", "Timeout %s: must be between 1ms and %s", c.Timeout, maxTimeout)
	}
	if c.Settle < 0 || c.Settle > maxSettleTime {
		bad("Settle", "Settle %s: must be between 0 and %s", c.Settle, maxSettleTime)
	}
	if c.Warmup < 0 || c.Warmup > time.Minute {
		bad("Warmup", "Warmup %s: must be between 0 and 1m", c.Warmup)
	}
}

// checkReplicas checks the replicas' settings.
func (c Config) checkReplicas(bad problem) {
	if c.ReadyWait < 100*time.Millisecond || c.ReadyWait > maxDuration {
		bad("ReadyWait", "ReadyWait %s: must be between 100ms and %s", c.ReadyWait, maxDuration)
	}
	if c.LocalReplicas < 1 || c.LocalReplicas > maxLocalReplicas {
		bad("LocalReplicas", "LocalReplicas %d: must be between 1 and %d replica processes", c.LocalReplicas, maxLocalReplicas)
	}
	if c.Rate > 0 && c.Rate < c.ReplicaCount() {
		bad("Rate", "Rate %d: below one request per second for each of the %d replicas; raise Rate or use fewer replicas", c.Rate, c.ReplicaCount())
	}
	if c.RMWDelay < 0 || c.RMWDelay > maxRMWDelay {
		bad("RMWDelay", "RMWDelay %s: must be between 0 and %s", c.RMWDelay, maxRMWDelay)
	}
}

// checkHistory checks the history's reads and its check.
func (c Config) checkHistory(bad problem) {
	if c.ReadEvery < 0 || c.ReadEvery > time.Minute {
		bad("ReadEvery", "ReadEvery %s: must be between 0 (no reads) and 1m", c.ReadEvery)
	}
	if c.CheckTimeout < time.Second || c.CheckTimeout > time.Hour {
		bad("CheckTimeout", "CheckTimeout %s: must be between 1s and 1h", c.CheckTimeout)
	}
}

// checkWorkloads checks retries and mixed writers, and what they exclude.
func (c Config) checkWorkloads(bad problem) {
	if c.Retries < 0 || c.Retries > 10 {
		bad("Retries", "Retries %d: must be between 0 and 10", c.Retries)
	}
	if c.AttemptTimeout < time.Millisecond || c.AttemptTimeout > c.Timeout {
		bad("AttemptTimeout", "AttemptTimeout %s: must be between 1ms and Timeout (%s)", c.AttemptTimeout, c.Timeout)
	}
	if c.CutRate < 0 || c.CutRate >= 1 {
		bad("CutRate", "CutRate %g: must be at least 0 and below 1", c.CutRate)
	}
	if c.Retries > 0 && len(c.Faults) > 0 {
		bad("Retries", "Retries and Faults: the cutting proxy stands in front of a replica the drills restart; run them separately")
	}
	if c.Mixed && len(c.Faults) > 0 {
		bad("Mixed", "Mixed and Faults: a drill is one strategy under one fault; run them separately")
	}
	if c.Mixed && len(c.Strategies) < 2 {
		bad("Mixed", "Mixed needs at least two Strategies to mix")
	}
}

// checkCapacity checks the capacity sweep's settings.
func (c Config) checkCapacity(bad problem) {
	if c.Capacity {
		if len(c.Faults) > 0 || c.Mixed || c.Retries > 0 {
			bad("Capacity", "Capacity runs alone: drop Faults, Mixed and Retries")
		}
		if c.CapacityP99 < time.Millisecond || c.CapacityP99 > time.Minute {
			bad("CapacityP99", "CapacityP99 %s: must be between 1ms and 1m", c.CapacityP99)
		}
		if c.CapacityErrors < 0 || c.CapacityErrors >= 1 {
			bad("CapacityErrors", "CapacityErrors %g: must be at least 0 and below 1", c.CapacityErrors)
		}
		if c.CapacityMaxRate < 50 || c.CapacityMaxRate > maxRate {
			bad("CapacityMaxRate", "CapacityMaxRate %d: must be between 50 and %d", c.CapacityMaxRate, maxRate)
		}
		if c.Duration == 0 || c.Requests > 0 {
			bad("Capacity", "Capacity steps are bounded by Duration alone")
		}
		for _, n := range c.CapacityReplicas {
			if n < 1 || n > maxLocalReplicas {
				bad("CapacityReplicas", "CapacityReplicas %d: must be between 1 and %d", n, maxLocalReplicas)
			}
		}
		if len(c.CapacityReplicas) > 0 && len(c.Replicas) > 0 {
			bad("CapacityReplicas", "CapacityReplicas needs the replicas the harness starts (it scales them): drop Replicas")
		}
	}
}

// checkFaults checks the fault drills' settings.
func (c Config) checkFaults(bad problem) {
	if c.Repeat < 1 || c.Repeat > 100 {
		bad("Repeat", "Repeat %d: must be between 1 and 100", c.Repeat)
	}
	if c.FaultTTL < time.Second || c.FaultTTL > time.Minute || c.FaultTTL%time.Second != 0 {
		bad("FaultTTL", "FaultTTL %s: must be whole seconds between 1s and 1m (etcd leases are whole seconds)", c.FaultTTL)
	}
	if c.WriteStall < 0 || c.WriteStall > maxRMWDelay {
		bad("WriteStall", "WriteStall %s: must be between 0 and %s", c.WriteStall, maxRMWDelay)
	}
	if !slices.Contains(drill.AOFPolicies, c.RedisAOF) {
		bad("RedisAOF", "RedisAOF %q: want one of %s", c.RedisAOF, strings.Join(drill.AOFPolicies, ", "))
	}
	if c.KeyedDrill {
		if len(c.Faults) > 0 || c.Mixed || c.Retries > 0 || c.Capacity {
			bad("KeyedDrill", "KeyedDrill runs alone: drop Faults, Mixed, Retries and Capacity")
		}
		if len(c.Replicas) > 0 || c.LocalReplicas != 2 {
			bad("KeyedDrill", "KeyedDrill needs the two replicas the harness starts: drop Replicas and LocalReplicas")
		}
	}
	if c.Soak != 0 {
		if c.Soak < time.Minute || c.Soak > 24*time.Hour {
			bad("Soak", "Soak %s: must be between 1m and 24h (a shorter one samples too little to judge)", c.Soak)
		}
		if len(c.Faults) > 0 || c.Mixed || c.Retries > 0 || c.Capacity || c.KeyedDrill {
			bad("Soak", "Soak runs alone: drop Faults, Mixed, Retries, Capacity and KeyedDrill")
		}
		if len(c.Replicas) > 0 || c.LocalReplicas < 2 {
			bad("Soak", "Soak needs at least two replicas the harness starts (it kills, pauses and cuts them off): drop Replicas")
		}
		if c.Requests > 0 {
			bad("Soak", "Soak sets each segment's duration itself: drop Requests")
		}
	}
	if len(c.Faults) > 0 && (c.Duration == 0 || c.Requests > 0) {
		bad("Faults", "Faults needs an attack bounded by Duration alone: a fault strikes a quarter into it, and a count could end the attack first")
	}
	if len(c.Faults) > 0 && c.SKUs != 1 {
		bad("SKUs", "SKUs %d: fault drills use one hot sku, so that the lock is always contended and tokens compare (each sku's lock counts its own)", c.SKUs)
	}
	if len(c.Faults) > 0 && c.Timeout <= 3*c.FaultTTL+10*time.Second {
		bad("Timeout", "Timeout %s: with Faults it must exceed the replicas' request timeout, 3 × FaultTTL + 10s (%s), or requests still being served count as unanswered", c.Timeout, 3*c.FaultTTL+10*time.Second)
	}
	if len(c.Faults) > 0 && c.Duration > 0 && c.Duration < 3*c.FaultTTL+time.Second {
		bad("Duration", "Duration %s: a fault drill needs at least 3 × FaultTTL + 1s (%s) to see the fault and the recovery", c.Duration, 3*c.FaultTTL+time.Second)
	}
	if len(c.Faults) > 0 && len(c.Replicas) == 0 && c.LocalReplicas < 2 {
		bad("LocalReplicas", "LocalReplicas %d: fault drills need at least 2 replicas (another replica takes the lock over from the one the fault hits, and clock skew sets replica b against the others)", c.LocalReplicas)
	}
	if c.UsesRedisCluster() {
		for _, f := range []string{drill.RedisRestart, drill.RedisClock} {
			if slices.Contains(c.Faults, f) {
				bad("Faults", "Faults %s needs one redis-server, and RedisCluster (or the redis-failover drill) puts the replicas on a Redis Cluster: run them separately", f)
			}
		}
		if len(c.Replicas) > 0 && c.RedisCluster {
			bad("RedisCluster", "RedisCluster applies only to the replicas the harness starts itself; replicas of your own take their --redis-cluster-addrs or REDIS_CLUSTER_ADDRS")
		}
	}
	if len(c.Replicas) > 0 {
		if len(c.Faults) > 0 {
			bad("Faults", "Faults needs the replicas the harness starts itself (it kills, stops and reconfigures them): drop Replicas")
		}
	}
}

// checkThresholds checks that the thresholds bound runs there are.
func (c Config) checkThresholds(bad problem) {
	if len(c.Thresholds) > 0 && (c.Capacity || c.KeyedDrill) {
		bad("Thresholds", "Thresholds with Capacity or KeyedDrill: a threshold bounds the runs of the comparison, the fault drills and the soak; a capacity sweep has its limits (CapacityP99, CapacityErrors), the keyed drill its promises")
	}
	for _, t := range c.Thresholds {
		switch {
		case t.Strategy != "" && (c.Mixed || c.Soak > 0):
			bad("Thresholds", "Thresholds %s: a mixed run (Mixed, Soak) is one run of every strategy; give the threshold for all (%s)", t, strings.TrimPrefix(t.String(), t.Strategy+":"))
		case t.Strategy != "" && !slices.Contains(c.Strategies, t.Strategy):
			bad("Thresholds", "Thresholds %s: %s is not among Strategies (%s)", t, t.Strategy, strings.Join(c.Strategies, ","))
		}
	}
}

// UsesRedisCluster reports whether the replicas the harness starts run on
// a Redis Cluster: --redis-cluster, or a drill that needs one.
func (c Config) UsesRedisCluster() bool {
	return c.RedisCluster || drill.NeedsRedisCluster(c.Faults)
}

// ReplicaCount is how many replicas the run attacks: those of --replicas,
// else the ones the harness starts.
func (c Config) ReplicaCount() int {
	if len(c.Replicas) > 0 {
		return len(c.Replicas)
	}
	return c.LocalReplicas
}

// ValidPrefix reports whether s can prefix the harness's skus.
func ValidPrefix(s string) bool {
	if len(s) == 0 || len(s) > maxPrefixLen {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return false
		}
	}
	return true
}

// ParseReplicas reads a comma-separated list of replica base URLs.
func ParseReplicas(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []string
	seen := map[string]bool{}
	for _, raw := range strings.Split(s, ",") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%q is not a base URL like http://127.0.0.1:8081", raw)
		}
		if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("%q: give the base URL only (scheme, host and port), the harness adds /v1/...", raw)
		}
		if u.Port() != "" {
			if p, err := strconv.Atoi(u.Port()); err != nil || p < 1 || p > 65535 {
				return nil, fmt.Errorf("%q: bad port", raw)
			}
		}
		base := u.Scheme + "://" + u.Host
		if seen[base] {
			return nil, fmt.Errorf("%q is listed twice", base)
		}
		seen[base] = true
		out = append(out, base)
	}
	if len(out) == 0 {
		return nil, errors.New("no URL in the list")
	}
	return out, nil
}

// ParseStrategies reads a comma-separated list of strategies, or "all",
// checked against the registry.
func ParseStrategies(s string) ([]string, error) {
	if strings.TrimSpace(s) == "all" {
		return strategy.Names(), nil
	}
	var out []string
	seen := map[string]bool{}
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !strategy.Known(name) {
			return nil, fmt.Errorf("unknown strategy %q (known: %s)", name, strings.Join(strategy.Names(), ", "))
		}
		if seen[name] {
			return nil, fmt.Errorf("%q is listed twice", name)
		}
		seen[name] = true
		out = append(out, name)
	}
	if len(out) == 0 {
		return nil, errors.New("no strategy in the list")
	}
	return out, nil
}
