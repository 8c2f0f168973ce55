package harness

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stocklock/stocklock/loadtest/env"
	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// Config is a harness run: its Scenario, and the settings of the load
// and of the replicas every scenario shares.
type Config struct {
	// Scenario is what the run does once the replicas are ready; nil is
	// DefaultCompare.
	Scenario Scenario

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

	// History and its check (every run).
	ReadEvery    time.Duration // a read of the stock this often during the attack; 0: none
	CheckTimeout time.Duration // the linearizability checker's time per sku

	// Thresholds are bounds on the runs' figures; a breach fails the
	// harness run (see report.Threshold).
	Thresholds []report.Threshold
}

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
// the comparison with the defaults the command line shows in --help, and
// the base every other program that drives the harness starts from. Its
// Strategies are every strategy of the registry.
func DefaultConfig() Config {
	return Config{
		Scenario:      DefaultCompare(),
		Strategies:    strategy.Names(),
		Rate:          100,
		Duration:      8 * time.Second,
		Stock:         100,
		Qty:           1,
		SKUs:          1,
		Workers:       8,
		MaxWorkers:    16,
		Timeout:       15 * time.Second,
		Settle:        300 * time.Millisecond,
		Warmup:        2 * time.Second,
		ReadyWait:     90 * time.Second,
		RMWDelay:      10 * time.Millisecond,
		LocalReplicas: 2,
		ReadEvery:     50 * time.Millisecond,
		CheckTimeout:  time.Minute,
	}
}

// Validate checks every setting, the scenario's too, and returns every
// problem at once, joined.
func (c Config) Validate() error {
	var errs []error
	c.Check(func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) })
	return errors.Join(errs...)
}

// Check reports every problem of the settings, the scenario's too, to bad.
// Its formats name fields by their Go names (a scenario's option as
// Capacity.P99), so that a command line can word them as its flags
// without touching the values in the arguments.
func (c Config) Check(bad Problem) {
	if c.Rate < 0 || c.Rate > maxRate {
		bad("Rate %d: must be between 0 (as fast as the workers allow) and %d requests per second", c.Rate, maxRate)
	}
	between(bad, "Duration", c.Duration, 0, maxDuration)
	between(bad, "Requests", c.Requests, 0, maxRequests)
	if c.Duration == 0 && c.Requests == 0 {
		bad("Duration and Requests are both 0: give a time or a count so that the attack ends")
	}
	if c.Duration > 0 && c.Duration < 100*time.Millisecond {
		bad("Duration %s: too short to measure anything; use at least 100ms", c.Duration)
	}
	between(bad, "Stock", c.Stock, 1, MaxStock)
	if c.Qty < 1 || c.Qty > c.Stock {
		bad("Qty %d: must be between 1 and Stock (%d)", c.Qty, c.Stock)
	}
	between(bad, "SKUs", c.SKUs, 1, maxSKUs)
	if c.Skew != 0 && !(c.Skew > 1 && c.Skew <= 100) {
		bad("Skew %g: must be 0 (uniform) or a Zipf exponent above 1 (and at most 100)", c.Skew)
	}
	if c.SKUPrefix != "" && !ValidPrefix(c.SKUPrefix) {
		bad("SKUPrefix %q: use letters, digits, '-', '_' and '.', at most %d characters (the service takes skus of up to 64)", c.SKUPrefix, maxPrefixLen)
	}
	between(bad, "Workers", c.Workers, 1, maxWorkers)
	if c.MaxWorkers < c.Workers || c.MaxWorkers > maxWorkers {
		bad("MaxWorkers %d: must be between Workers (%d) and %d", c.MaxWorkers, c.Workers, maxWorkers)
	}
	between(bad, "Timeout", c.Timeout, time.Millisecond, maxTimeout)
	between(bad, "Settle", c.Settle, 0, maxSettleTime)
	between(bad, "Warmup", c.Warmup, 0, time.Minute)
	between(bad, "ReadyWait", c.ReadyWait, 100*time.Millisecond, maxDuration)
	between(bad, "LocalReplicas", c.LocalReplicas, 1, maxLocalReplicas)
	if c.Rate > 0 && c.Rate < c.ReplicaCount() {
		bad("Rate %d: below one request per second for each of the %d replicas; raise Rate or use fewer replicas", c.Rate, c.ReplicaCount())
	}
	between(bad, "RMWDelay", c.RMWDelay, 0, maxRMWDelay)
	if len(c.Replicas) > 0 && c.RedisCluster {
		bad("RedisCluster applies only to the replicas the harness starts itself; replicas of your own take their --redis-cluster-addrs or REDIS_CLUSTER_ADDRS")
	}
	if c.ReadEvery < 0 || c.ReadEvery > time.Minute {
		bad("ReadEvery %s: must be between 0 (no reads) and 1m", c.ReadEvery)
	}
	between(bad, "CheckTimeout", c.CheckTimeout, time.Second, time.Hour)
	for _, t := range c.Thresholds {
		if !t.Known() {
			bad("Thresholds %s: want a metric of report.Metrics and one of < <= > >= == !=", t)
		}
		if _, flash := c.scenario().(*Flash); report.IsFlashMetric(t.Metric) && !flash {
			bad("Thresholds %s: %s is a figure of loadtest flash only", t, t.Metric)
		}
		if t.Strategy != "" && !slices.Contains(c.Strategies, t.Strategy) {
			bad("Thresholds %s: %s is not among Strategies (%s)", t, t.Strategy, strings.Join(c.Strategies, ","))
		}
	}
	c.scenario().Check(c, bad)
}

// Problem records one problem of a Config, as for fmt.Sprintf (see Check).
type Problem func(format string, a ...any)

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
	return len(s) > 0 && len(s) <= maxPrefixLen && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.", r))
	})
}

// ParseReplicas reads a comma-separated list of replica base URLs.
func ParseReplicas(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	return parseList(s, "URL", func(raw string) (string, error) {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", fmt.Errorf("%q is not a base URL like http://127.0.0.1:8081", raw)
		}
		if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return "", fmt.Errorf("%q: give the base URL only (scheme, host and port), the harness adds /v1/...", raw)
		}
		if p, err := strconv.Atoi(u.Port()); u.Port() != "" && (err != nil || p < 1 || p > 65535) {
			return "", fmt.Errorf("%q: bad port", raw)
		}
		return u.Scheme + "://" + u.Host, nil
	})
}

// ParseStrategies reads a comma-separated list of strategies, or "all",
// checked against the registry.
func ParseStrategies(s string) ([]string, error) {
	if strings.TrimSpace(s) == "all" {
		return strategy.Names(), nil
	}
	return parseList(s, "strategy", func(name string) (string, error) {
		if !strategy.Known(name) {
			return "", fmt.Errorf("unknown strategy %q (known: %s)", name, strings.Join(strategy.Names(), ", "))
		}
		return name, nil
	})
}

// parseList reads a comma-separated list of what, each item through
// parse: no item twice, at least one.
func parseList(s, what string, parse func(string) (string, error)) ([]string, error) {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		v, err := parse(item)
		if err != nil {
			return nil, err
		}
		if slices.Contains(out, v) {
			return nil, fmt.Errorf("%q is listed twice", v)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no %s in the list", what)
	}
	return out, nil
}

// between reports field name's value v unless lo <= v <= hi.
func between[T cmp.Ordered](bad Problem, name string, v, lo, hi T) {
	if v < lo || v > hi {
		bad(name+" %v: must be between %v and %v", v, whole(lo), whole(hi))
	}
}

// whole writes a bound of whole minutes or hours as 1m or 1h, not 1m0s.
func whole(v any) any {
	d, ok := v.(time.Duration)
	if !ok {
		return v
	}
	s := d.String()
	for _, unit := range []string{"m0s", "h0m"} {
		if strings.HasSuffix(s, unit) {
			s = s[:len(s)-2]
		}
	}
	return s
}
