package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/stocklock/stocklock/pkg/strategy"

	"github.com/stocklock/stocklock/loadtest/drill"
	"github.com/stocklock/stocklock/loadtest/env"
	"github.com/stocklock/stocklock/loadtest/harness"
	"github.com/stocklock/stocklock/loadtest/report"
)

// envName is the environment variable that backs flag name.
func envName(name string) string {
	return "LOADTEST_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

const usageText = `Usage: go run ./loadtest [flags]

Hammers the stock service's decrement endpoint with Vegeta, one strategy
after another, the rate split evenly across the replicas (one attacker
each, as if each had its own clients), and checks that no safe
strategy oversells, loses an update or disagrees with its order ledger.

With no --replicas it is the whole scenario in one command: it starts a
MongoDB (MONGO_URI, else an embedded FerretDB behind the per-document gate), a
Redis (REDIS_ADDR, else redis-server from PATH, else miniredis) and an etcd
(ETCD_ENDPOINTS, else an embedded etcd server), builds ./services/stock,
starts --local-replicas replica processes (two by default) on free loopback
ports, runs the comparison and
stops everything it started. With --replicas, the replicas need
ETCD_ENDPOINTS of their own for the etcd-lock strategy.

For every strategy it resets each sku's stock with PUT (split across the
replicas' --buckets documents for a strategy that sells from split stock,
buckets), attacks, then reads
the item and the ledger back and reports sold, oversold, lost updates
(acknowledged sales the stock does not reflect), ledger mismatches, status
classes, sales/s, req/s, latency percentiles and the replicas' lock wait p99.
The table is printed; results.json, results.md, chart.svg and a Vegeta plot
per strategy go to the output directory.

With --faults it runs fault drills instead of the comparison: each fault
is injected into the replica processes (or the stores) while the attack
runs, against every strategy it applies to, --repeat times. crash kills the
replica holding the lock with SIGKILL; pause stops it with SIGSTOP for twice
--fault-ttl (with fencing on, then off as a demonstration); redis-restart
and mongo-restart restart the stores the harness started; clock-skew runs
replica b with its lease clock 2s off; leader-kill kills the leader of a
three-member embedded etcd cluster. The table aggregates the repeats:
anomalies, refusals by kind, the time until sales resumed, and whether
fencing tokens kept increasing. results.md and faults.svg go to the output
directory. See docs/faults.md.

Every run also records its history: each request's client, replica, call
and return times, sku, qty, strategy, idempotency key and outcome, and a
read of the stock every --read-every by a separate client. It is written as
history-<run>.jsonl and checked for linearizability against a model of one
inventory item (porcupine): the table's "linearizable" column says yes, no,
or unknown (the checker ran out of --check-timeout). A safe strategy whose
history is not linearizable fails the run; the violation is drawn in
history-<run>.html. --check-history FILE checks a saved history offline.
See docs/linearizability.md.

Workloads beyond one strategy at a time: --mixed runs every chosen
strategy at once on the same skus; --retries N re-sends each request whose
answer did not arrive, with the same Idempotency-Key, behind an attempt
timeout (--attempt-timeout) and a proxy that cuts a share (--cut-rate) of
the first replica's answers, and counts units sold twice for one key.

Thresholds, as in k6: --threshold '[strategy:]metric op value', repeatable
(or comma-separated), bounds a figure of every run, or of one strategy's
runs: --threshold 'p99<300ms' --threshold 'atomic:sales_per_s>=150'
--threshold 'oversold==0'. op is <, <=, >, >=, == or !=; a latency takes a
unit (a bare number is ms). Each is checked on every run it applies to;
a breach is a failed check. The metrics:
%s
Every run's checks (safety, thresholds, and a capacity step's limits) are
the check table of results.md and report.html, one page with the table,
the charts, the checks, the fault timeline and the histories' pictures
that opens offline.

Exit status: 0 when every check passed; 1 when a safety check failed: a
safe strategy (%s) showed an anomaly, in its totals, its ledger or its
history, or a drill broke its promise (even if the harness then broke
down); 2 for bad flags or a harness error; 3 when every safety check
passed and a --threshold was breached. The unsafe ones (%s) are reported
as "demonstrated" or "not reproduced in this run", never as a failure.

Every flag can also be set through the environment variable shown in
brackets; a flag on the command line wins.

Flags:
`

// ParseConfig parses args (without the program name) with env fallbacks
// from getenv, and validates everything before any request is sent.
// It returns flag.ErrHelp for --help, after writing the usage to out.
func ParseConfig(args []string, getenv func(string) string, out io.Writer) (options, error) {
	var c options
	d := harness.DefaultConfig()
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(out)

	l := defineFlags(fs, &c, d)

	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), usageText, report.Metrics(),
			strings.Join(strategy.NamesOf(func(in strategy.Info) bool { return in.Safe }), ", "),
			strings.Join(strategy.NamesOf(func(in strategy.Info) bool { return !in.Safe }), ", "))
		fs.VisitAll(func(f *flag.Flag) {
			name, usage := flag.UnquoteUsage(f)
			line := "  --" + f.Name
			if name != "" {
				line += " " + name
			}
			fmt.Fprintf(fs.Output(), "%s  [%s]\n    \t%s", line, envName(f.Name), usage)
			if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" {
				fmt.Fprintf(fs.Output(), " (default %s)", f.DefValue)
			}
			fmt.Fprintln(fs.Output())
		})
		fmt.Fprint(fs.Output(), `
The replicas the harness starts also read MONGO_URI, REDIS_ADDR (else
embedded stores are started: FerretDB and etcd in devstored processes,
built from this module on first use) and GOFLAGS for the builds.
`)
	}

	// Parse quietly: a bad flag gets one clear line from the caller, not
	// the whole usage; --help gets the usage.
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		fs.Usage()
		return c, err
	}
	if err != nil {
		// The flag package names flags with one dash; the help uses two.
		msg := strings.Replace(err.Error(), "for flag -", "for --", 1)
		msg = strings.Replace(msg, "not defined: -", "not defined: --", 1)
		return c, errors.New(msg)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q (every setting is a --flag; see --help)", fs.Arg(0))
	}
	c.set = map[string]bool{}
	c.flags = flagsOfFields(fs, &c.Config)
	fs.Visit(func(f *flag.Flag) { c.set[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if c.set[f.Name] || envErr != nil {
			return
		}
		v := getenv(envName(f.Name))
		if v == "" {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			envErr = fmt.Errorf("%s=%q: %v", envName(f.Name), v, err)
			return
		}
		c.set[f.Name] = true
	})
	if envErr != nil {
		return c, envErr
	}

	if c.Replicas, err = harness.ParseReplicas(l.replicas); err != nil {
		return c, fmt.Errorf("--replicas: %w", err)
	}
	if c.Strategies, err = harness.ParseStrategies(l.strategies); err != nil {
		return c, fmt.Errorf("--strategies: %w", err)
	}
	if c.Faults, err = drill.Parse(l.faults); err != nil {
		return c, fmt.Errorf("--faults: %w", err)
	}
	// A drill needs sales before and after its fault: more stock than the
	// default run sells in its 8 seconds.
	if len(c.Faults) > 0 && !c.set["stock"] {
		c.Stock = 2000
	}
	// The replicas' own request timeout grows with the fault TTL (see
	// faultBaseline); the harness must wait longer than they work.
	if c.Soak > 0 && !c.set["stock"] {
		// Enough stock that a segment sells under load to its end.
		c.Stock = max(2000, c.Rate*int(harness.SoakSegment(c.Soak)/time.Second)*2)
	}
	if c.Disturbs() && !c.set["timeout"] {
		c.Timeout = max(c.Timeout, 3*c.FaultTTL+15*time.Second)
	}
	if c.Capacity {
		if c.CapacityReplicas, err = parseCounts(l.capReplicas); err != nil {
			return c, fmt.Errorf("--capacity-replicas: %w", err)
		}
		for flag, set := range map[string]func(){
			"duration":   func() { c.Duration = 3 * time.Second },
			"rmw-delay":  func() { c.RMWDelay = 0 },
			"read-every": func() { c.ReadEvery = 0 },
		} {
			if !c.set[flag] {
				set()
			}
		}
	}
	// --requests alone means "send this many", not "this many or 8s".
	if c.Requests > 0 && !c.set["duration"] {
		c.Duration = 0
	}
	// The replicas the harness starts get a token of their own.
	if c.AdminToken == "" && len(c.Replicas) == 0 {
		var b [16]byte
		_, _ = rand.Read(b[:])
		c.AdminToken = hex.EncodeToString(b[:])
	}
	return c, c.validate()
}

// options are the command line's settings: a harness run, or the live
// page that starts harness runs.
type options struct {
	harness.Config
	Serve     bool
	ServeAddr string

	// set names the flags given on the command line or by the
	// environment, so that a flag that does not apply is refused rather
	// than ignored; flags words Config's fields as the flags that set them.
	set   map[string]bool
	flags map[string]string
}

// onlyWith lists the flags that apply only with another setting: given
// without it, they are refused rather than ignored.
var onlyWith = []struct {
	flags   []string
	applies func(options) bool
	why     string
}{
	{[]string{"attempt-timeout", "cut-rate"}, func(c options) bool { return c.Retries > 0 }, "applies only with --retries"},
	{[]string{"capacity-p99", "capacity-errors", "capacity-max-rate", "capacity-replicas"}, func(c options) bool { return c.Capacity }, "applies only with --capacity"},
	{[]string{"repeat", "fault-ttl", "write-stall", "redis-aof"}, options.Disturbs,
		"applies only to fault drills: add --faults (for example --faults all)"},
	{[]string{"local-replicas", "rmw-delay", "stock-bin", "replica-log"}, func(c options) bool { return len(c.Replicas) == 0 },
		"applies only to the replicas the harness starts itself; drop it or drop --replicas"},
	{[]string{"duration"}, func(c options) bool { return c.Soak == 0 }, "does not apply to --soak, which sets each segment's duration itself"},
	{[]string{"serve-addr"}, func(c options) bool { return c.Serve }, "applies only with --serve"},
	{[]string{"faults", "mixed", "retries", "check-history", "requests", "threshold"}, func(c options) bool { return !c.Serve },
		"does not apply to --serve: the page runs one strategy after another, and strikes faults from its buttons"},
}

func (c options) validate() error {
	var errs []error
	for _, e := range joined(c.Validate()) {
		errs = append(errs, c.worded(e))
	}
	for _, o := range onlyWith {
		if o.applies(c) {
			continue
		}
		for _, f := range o.flags {
			if c.set[f] {
				errs = append(errs, fmt.Errorf("--%s %s", f, o.why))
			}
		}
	}
	if c.Serve {
		if _, _, serr := net.SplitHostPort(c.ServeAddr); serr != nil {
			errs = append(errs, fmt.Errorf("--serve-addr %q: give host:port, for example 127.0.0.1:8090", c.ServeAddr))
		}
	}
	return errors.Join(errs...)
}

// joined returns the errors errors.Join put together in err.
func joined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err != nil {
		return []error{err}
	}
	return nil
}

// fieldNames matches the Go names of Config's fields in a message.
var fieldNames = regexp.MustCompile(`\b[A-Z][A-Za-z0-9]*\b`)

// worded returns a harness.FieldError with its fields named as the flags
// that set them; the values it quotes stay as they are.
func (c options) worded(err error) error {
	var fe *harness.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	format := fieldNames.ReplaceAllStringFunc(fe.Format, func(name string) string {
		if f, ok := c.flags[name]; ok {
			return "--" + f
		}
		return name
	})
	return fmt.Errorf(format, fe.Args...)
}

// flagsOfFields maps each field of cfg to the flag that sets it: a flag
// whose value points at the field, or a list flag of listFields. Reading
// it from the flags keeps one place (defineFlags) that binds them.
func flagsOfFields(fs *flag.FlagSet, cfg *harness.Config) map[string]string {
	rv := reflect.ValueOf(cfg).Elem()
	byAddr := map[uintptr]string{}
	for i := range rv.NumField() {
		byAddr[rv.Field(i).Addr().Pointer()] = rv.Type().Field(i).Name
	}
	out := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if v := reflect.ValueOf(f.Value); v.Kind() == reflect.Pointer {
			if field, ok := byAddr[v.Pointer()]; ok {
				out[field] = f.Name
			}
		}
	})
	maps.Copy(out, listFields)
	return out
}

// thresholds is --threshold: each use adds the comma-separated thresholds
// it gives.
type thresholds []report.Threshold

func (t *thresholds) String() string {
	if t == nil {
		return ""
	}
	var s []string
	for _, th := range *t {
		s = append(s, th.String())
	}
	return strings.Join(s, ",")
}

func (t *thresholds) Set(v string) error {
	for f := range strings.SplitSeq(v, ",") {
		th, err := report.ParseThreshold(f)
		if err != nil {
			return err
		}
		*t = append(*t, th)
	}
	return nil
}

// parseCounts reads a comma-separated list of whole numbers.
func parseCounts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a whole number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// lists are the flags whose values are parsed after the flag package: the
// comma-separated lists.
type lists struct{ replicas, strategies, faults, capReplicas string }

// listFields maps the Config fields that lists fill to their flags.
var listFields = map[string]string{
	"Replicas": "replicas", "Strategies": "strategies", "Faults": "faults", "CapacityReplicas": "capacity-replicas",
}

// defineFlags defines every flag of c on fs, with d's defaults.
func defineFlags(fs *flag.FlagSet, c *options, d harness.Config) *lists {
	var l lists
	fs.StringVar(&l.replicas, "replicas", "", "comma-separated base URLs of running replicas, e.g. http://127.0.0.1:8081,http://127.0.0.1:8082; each gets an equal share of the rate and workers. Empty: start --local-replicas replicas")
	fs.StringVar(&l.strategies, "strategies", strings.Join(d.Strategies, ","), "comma-separated strategies to run, in order; \"all\" for every one")
	fs.IntVar(&c.Rate, "rate", d.Rate, "requests per second per strategy; 0 sends as fast as --max-workers allow")
	fs.DurationVar(&c.Duration, "duration", d.Duration, "attack time per strategy (with --requests: whichever ends first; set 0 to be bounded by --requests only)")
	fs.IntVar(&c.Requests, "requests", 0, "requests per strategy; 0: bounded by --duration only")
	fs.IntVar(&c.Stock, "stock", d.Stock, "stock each sku is reset to before each strategy")
	fs.IntVar(&c.Qty, "qty", d.Qty, "units each request asks to buy")
	fs.IntVar(&c.SKUs, "skus", d.SKUs, "number of skus the requests spread over (1: one hot sku)")
	fs.Float64Var(&c.Skew, "skew", 0, "how requests spread over --skus: 0 uniform, or a Zipf exponent > 1 (larger: sku 0 gets more of them)")
	fs.StringVar(&c.SKUPrefix, "sku-prefix", "", "sku name prefix; every strategy gets its own skus <prefix>-<strategy>-<i>. Default: lt-<timestamp>, fresh every run")
	fs.IntVar(&c.Workers, "workers", d.Workers, "initial Vegeta workers (concurrent requests)")
	fs.IntVar(&c.MaxWorkers, "max-workers", d.MaxWorkers, "most Vegeta workers, i.e. requests in flight at once; caps concurrency so that an over-capacity rate degrades instead of collapsing. Each waiting request of a lock strategy polls the lock, so on the embedded store more of them mostly add lock traffic")
	fs.DurationVar(&c.Timeout, "timeout", d.Timeout, "per-request timeout")
	fs.StringVar(&c.OutDir, "out", "", "output directory for the reports (default reports/<timestamp>)")
	fs.DurationVar(&c.Settle, "settle", d.Settle, "pause after each attack before reading the stock and the ledger back")
	fs.DurationVar(&c.Warmup, "warmup", d.Warmup, "before the first strategy, send atomic decrements of a scratch sku for this long, so that connection pools are warm for every strategy alike; 0 skips it")
	fs.DurationVar(&c.ReadyWait, "ready-timeout", d.ReadyWait, "how long to wait for every replica's /readyz before giving up")
	fs.DurationVar(&c.RMWDelay, "rmw-delay", d.RMWDelay, "replicas the harness starts: pause between reading and writing the stock, which widens the race window of unsafe and local (with 2ms, an idle machine may not show local's race at all)")
	fs.IntVar(&c.LocalReplicas, "local-replicas", d.LocalReplicas, fmt.Sprintf("replicas the harness starts: how many replica processes (REPLICA_ID a, b, c, ...), 1 to %d; each gets an equal share of the rate and workers, and fault drills need at least 2", env.MaxReplicas))
	fs.StringVar(&c.StockBin, "stock-bin", "", "replicas the harness starts: a prebuilt services/stock binary instead of go build")
	fs.BoolVar(&c.ReplicaLog, "replica-log", false, "replicas the harness starts: copy their logs to stderr (they always go to the output directory)")
	fs.BoolVar(&c.Quiet, "quiet", false, "no live progress line")
	fs.BoolVar(&c.Serve, "serve", false, "serve the live page instead of running once: start the stores and the replicas (or use --replicas), print the page's address and run races from the browser until Ctrl-C (see docs/live-page.md)")
	fs.StringVar(&c.ServeAddr, "serve-addr", "127.0.0.1:8090", "with --serve: the address the page listens on")
	fs.StringVar(&c.AdminToken, "admin-token", "", "the replicas' admin token (their ADMIN_TOKEN), sent with every stock reset; replicas the harness starts get a fresh random one when it is empty")
	fs.BoolVar(&c.RedisCluster, "redis-cluster", false, "replicas the harness starts: on a Redis Cluster (REDIS_CLUSTER_ADDRS, else 3 masters + 3 replicas of redis-server on loopback) instead of one Redis; redis-lock runs then report their load by master (use --skus 100 or more to spread it). --faults redis-failover implies it (see docs/redis-cluster.md)")
	fs.StringVar(&l.faults, "faults", "", "fault drills instead of the plain comparison, comma-separated: "+strings.Join(drill.Names(), ", ")+", store-restart (both restarts) or all. Each fault runs against every strategy it applies to (see docs/faults.md)")
	fs.IntVar(&c.Repeat, "repeat", d.Repeat, "with --faults or --keyed-drill: run every drill this many times; the report aggregates them")
	fs.DurationVar(&c.Soak, "soak", 0, "instead of the comparison: steady mixed load of every safe strategy of --strategies for this long (at least 1m), in one-minute segments (a third of a shorter soak), each a mixed run judged as usual with a fault of the catalogue striking it (crash, store-partition, latency, pause, resets, mongo-restart, redis-restart in turn); samples each replica's memory, goroutines, open files and sockets every 5s, fails if one grows without bound, and draws them in soak.svg (see docs/faults.md#soak)")
	fs.BoolVar(&c.KeyedDrill, "keyed-drill", false, "instead of the comparison: purchases with an Idempotency-Key each (40 per safe strategy of --strategies, or --requests), retried across the two replicas until they sell, while replica a is killed -9 and restarted and replica b is frozen past its lock TTL and heartbeat timeout; checks that each sold exactly once and reports how long purchases took to settle (see docs/every-writer.md)")
	fs.DurationVar(&c.FaultTTL, "fault-ttl", d.FaultTTL, "with --faults: the replicas' lock TTL (a crashed holder's lease lasts this long; a pause lasts twice this)")
	fs.StringVar(&c.RedisAOF, "redis-aof", d.RedisAOF, "with --faults redis-restart: the appendfsync policy ("+strings.Join(drill.AOFPolicies, ", ")+") of the drill that kills redis-server (-9) and starts it on its append-only file, under redis-stock acknowledging after Redis")
	fs.DurationVar(&c.WriteStall, "write-stall", d.WriteStall, "with --faults: the replicas' --write-stall, a sleep after the lease check and before the stock write, deaf to the lease: most of a lock holder's time, so that a pause lands there and the fence (not the lease check) must refuse the late write")

	fs.Var((*thresholds)(&c.Thresholds), "threshold", "a bound on a figure of every run, or of one strategy's runs, as k6 writes them: p99<300ms, sales_per_s>=150, atomic:oversold==0; repeatable, or comma-separated. A breach is a failed check: exit status 3 (see the metrics above)")
	fs.DurationVar(&c.ReadEvery, "read-every", d.ReadEvery, "a separate client reads each sku's stock (GET, replicas in turn) this often during the attack, so that the history has reads; 0: no reads")
	fs.DurationVar(&c.CheckTimeout, "check-timeout", d.CheckTimeout, "the linearizability checker's time budget per sku; when it runs out the verdict is unknown, never a pass")
	fs.StringVar(&c.CheckHistory, "check-history", "", "check a saved history (a history-*.jsonl of an earlier run) for linearizability, draw a violation next to it (FILE.html; a history of one sku and at most 60 operations also as a timeline, FILE.svg), and exit: 0 linearizable, 1 not, 2 unknown or unreadable. No load is sent")
	fs.BoolVar(&c.Capacity, "capacity", false, "capacity sweep instead of the comparison: each strategy at 50 req/s, then twice as much every --duration (3s by default here), on fresh skus with stock it cannot sell out and no read-modify-write delay unless --rmw-delay is set, until a step passes the limits; reports each strategy's capacity and capacity.svg (see docs/results.md)")
	fs.DurationVar(&c.CapacityP99, "capacity-p99", d.CapacityP99, "with --capacity: a step whose p99 exceeds this is past the limits")
	fs.Float64Var(&c.CapacityErrors, "capacity-errors", d.CapacityErrors, "with --capacity: a step whose errors and 503s exceed this share of its requests is past the limits")
	fs.IntVar(&c.CapacityMaxRate, "capacity-max-rate", d.CapacityMaxRate, "with --capacity: the highest rate offered")
	fs.StringVar(&l.capReplicas, "capacity-replicas", "", "with --capacity: comma-separated replica counts to sweep, e.g. 2,4,8 (replicas the harness starts); empty: --local-replicas")
	fs.BoolVar(&c.Mixed, "mixed", false, "mixed writers: one run in which every chosen strategy decrements the same skus at once through every replica (each request picks the next strategy in turn); the verdict is on the shared skus, and safe only if every chosen strategy is")
	fs.IntVar(&c.Retries, "retries", 0, "re-send a decrement whose answer did not arrive (attempt timeout, cut connection, 5xx other than the refusals) up to this many times with the same Idempotency-Key; turns on the attempt timeout and the cutting proxy in front of the first replica; the verdict counts units the ledger sold twice for one key")
	fs.DurationVar(&c.AttemptTimeout, "attempt-timeout", d.AttemptTimeout, "with --retries: each attempt's timeout, shorter than the replicas' slowest work under contention (lock strategies' p95 on the embedded store), so that some answers arrive after the client gave up")
	fs.Float64Var(&c.CutRate, "cut-rate", d.CutRate, "with --retries: the share of the first replica's answers that the proxy in front of it cuts (the connection closes as the answer arrives)")
	return &l
}
