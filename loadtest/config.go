package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/stocklock/stocklock/pkg/strategy"

	"github.com/stocklock/stocklock/loadtest/drill"
	"github.com/stocklock/stocklock/loadtest/env"
	"github.com/stocklock/stocklock/loadtest/harness"
	"github.com/stocklock/stocklock/loadtest/report"
)

func envName(name string) string {
	return "LOADTEST_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// command is one subcommand: scenario (a fresh value with its defaults,
// which --help shows), its flags beyond the shared ones, onto the
// options' Config and Scenario, finish (from what was parsed, arg the
// positional argument: what follows from other flags unless set names
// them) and run, if it is not a harness run.
type command struct {
	name, args, summary string
	scenario            func() harness.Scenario
	flags               func(fs *flag.FlagSet, c *options)
	finish              func(c *options, arg string, set map[string]bool) error
	run                 func(ctx context.Context, c options, stdout, stderr io.Writer) int
}

// commands are the subcommands, the first the default.
var commands = []command{
	{name: "compare", summary: "every strategy of --strategies in turn under the same load (the default)",
		scenario: func() harness.Scenario { return harness.DefaultCompare() },
		flags: func(fs *flag.FlagSet, c *options) {
			s := c.Scenario.(*harness.Compare)
			fs.DurationVar(&c.Duration, "duration", c.Duration, "attack time per strategy (with --requests: whichever ends first; set 0 to be bounded by --requests only)")
			fs.IntVar(&c.Requests, "requests", 0, "requests per strategy; 0: bounded by --duration only")
			thresholdFlag(fs, c)
			fs.StringVar(&c.CheckHistory, "check-history", "", "check a saved history (a history-*.jsonl of an earlier run) for linearizability, draw a violation next to it (FILE.html; a history of one sku and at most 60 operations also as a timeline, FILE.svg), and exit: 0 linearizable, 1 not, 2 unknown or unreadable. No load is sent")
			fs.BoolVar(&s.Mixed, "mixed", false, "mixed writers: one run in which every chosen strategy decrements the same skus at once through every replica (each request picks the next strategy in turn); the verdict is on the shared skus, and safe only if every chosen strategy is")
			fs.IntVar(&s.Retries, "retries", 0, "re-send a decrement whose answer did not arrive (attempt timeout, cut connection, 5xx other than the refusals) up to this many times with the same Idempotency-Key; turns on the attempt timeout and the cutting proxy in front of the first replica; the verdict counts units the ledger sold twice for one key")
			fs.DurationVar(&s.AttemptTimeout, "attempt-timeout", s.AttemptTimeout, "with --retries: each attempt's timeout, shorter than the replicas' slowest work under contention (lock strategies' p95 on the embedded store), so that some answers arrive after the client gave up")
			fs.Float64Var(&s.CutRate, "cut-rate", s.CutRate, "with --retries: the share of the first replica's answers that the proxy in front of it cuts (the connection closes as the answer arrives)")
		},
		finish: func(c *options, _ string, set map[string]bool) error {
			// --requests alone means "send this many", not "this many or 8s".
			if c.Requests > 0 && !set["duration"] {
				c.Duration = 0
			}
			for _, f := range []string{"attempt-timeout", "cut-rate"} {
				if set[f] && c.Scenario.(*harness.Compare).Retries == 0 {
					return fmt.Errorf("--%s applies only with --retries", f)
				}
			}
			return nil
		}},
	{name: "faults", args: " FAULTS", summary: "fault drills: each of FAULTS struck while the load runs, against every strategy it applies to",
		scenario: func() harness.Scenario { return harness.DefaultFaults() },
		flags: func(fs *flag.FlagSet, c *options) {
			s := c.Scenario.(*harness.Faults)
			fs.DurationVar(&c.Duration, "duration", c.Duration, "attack time per strategy")
			thresholdFlag(fs, c)
			fs.IntVar(&s.Repeat, "repeat", s.Repeat, "run every drill this many times; the report aggregates them")
			drillFlags(fs, &s.Drills)
		},
		finish: func(c *options, arg string, _ map[string]bool) (err error) {
			if arg == "" {
				return fmt.Errorf("name the faults: loadtest faults %s (or all)", strings.Join(drill.Names()[:2], ","))
			}
			s := c.Scenario.(*harness.Faults)
			if s.Faults, err = drill.Parse(arg); err != nil {
				return fmt.Errorf("faults: %w", err)
			}
			return nil
		}},
	{name: "capacity", summary: "each strategy's capacity: the offered rate doubled until a step passes the limits",
		scenario: func() harness.Scenario { return harness.DefaultCapacity() },
		flags: func(fs *flag.FlagSet, c *options) {
			s := c.Scenario.(*harness.Capacity)
			fs.DurationVar(&c.Duration, "duration", c.Duration, "each step's attack time")
			fs.DurationVar(&s.P99, "capacity-p99", s.P99, "a step whose p99 exceeds this is past the limits")
			fs.Float64Var(&s.Errors, "capacity-errors", s.Errors, "a step whose errors and 503s exceed this share of its requests is past the limits")
			fs.IntVar(&s.MaxRate, "capacity-max-rate", s.MaxRate, "the highest rate offered")
			fs.BoolVar(&s.PastKnee, "past-knee", false, "then go on past each strategy's knee (its highest rate within the limits) to 2, 4 and 8 times it (at most 5000 req/s) with the open model of loadtest flash, and draw goodput against offered load (goodput.svg)")
			fs.Func("capacity-replicas", "comma-separated replica counts to sweep, e.g. 2,4,8 (replicas the harness starts); empty: --local-replicas", func(v string) error {
				s.Replicas = nil
				for f := range strings.SplitSeq(v, ",") {
					if f = strings.TrimSpace(f); f != "" {
						n, err := strconv.Atoi(f)
						if err != nil {
							return fmt.Errorf("%q is not a whole number", f)
						}
						s.Replicas = append(s.Replicas, n)
					}
				}
				return nil
			})
		}},
	{name: "soak", summary: "steady mixed load for --duration, a fault every segment, the replicas' resources sampled",
		scenario: func() harness.Scenario { return harness.DefaultSoak() },
		flags: func(fs *flag.FlagSet, c *options) {
			s := c.Scenario.(*harness.Soak)
			fs.DurationVar(&s.Duration, "duration", s.Duration, "how long the soak runs (at least 1m), in one-minute segments (a third of a shorter soak)")
			thresholdFlag(fs, c)
			drillFlags(fs, &s.Drills)
		}},
	{name: "keyed", summary: "purchases with an Idempotency-Key each, retried while the replicas are killed and frozen",
		scenario: func() harness.Scenario { return harness.DefaultKeyed() },
		flags: func(fs *flag.FlagSet, c *options) {
			s := c.Scenario.(*harness.Keyed)
			fs.IntVar(&s.Purchases, "requests", s.Purchases, "purchases per safe strategy of --strategies")
			fs.IntVar(&s.Repeat, "repeat", s.Repeat, "run the drill this many times; the report aggregates them")
			drillFlags(fs, &s.Drills)
		}},
	{name: "checkout", summary: "buyers who hold, abandon, confirm or confirm late, beside plain decrements, on the strategies that take holds",
		scenario: func() harness.Scenario { return harness.DefaultCheckout() },
		flags: func(fs *flag.FlagSet, c *options) {
			co := c.Scenario.(*harness.Checkout)
			fs.DurationVar(&c.Duration, "duration", c.Duration, "how long buyers arrive, per strategy")
			fs.Float64Var(&co.Abandon, "abandon", co.Abandon, "share of the holding buyers who never confirm: their units return when the hold expires")
			fs.Float64Var(&co.Late, "late", co.Late, "share of the holding buyers who confirm late on purpose: only once a read of the hold says it expired (the store's clock decides); each must be refused")
			fs.DurationVar(&co.Think, "think", co.Think, "from a hold's answer to its confirm, for the buyers who confirm in time")
			fs.DurationVar(&co.HoldTTL, "hold-ttl", co.HoldTTL, "the holds' time to live (1s to 1m)")
			fs.IntVar(&co.Probes, "probes", co.Probes, "expiry probes per strategy: each holds the one unit of a sku of its own and buys it from the moment the hold can expire")
			fs.Func("faults", "comma-separated faults struck in turn during each strategy's run ("+strings.Join(harness.CheckoutFaults, ", ")+", all or none; default none)", func(v string) (err error) {
				co.Faults, err = harness.ParseCheckoutFaults(v)
				return err
			})
		}},
	{name: "flash", summary: "a flash sale: a herd of buyers, each its own request, most after the last unit, on the hot-sku strategies",
		scenario: func() harness.Scenario { return harness.DefaultFlash() },
		flags: func(fs *flag.FlagSet, c *options) {
			f := c.Scenario.(*harness.Flash)
			fs.IntVar(&f.Buyers, "buyers", f.Buyers, "buyers per strategy, each one request of its own (an open model: no worker cap)")
			fs.DurationVar(&f.Over, "over", f.Over, "the buyers arrive over this")
			fs.StringVar(&f.Shape, "shape", f.Shape, "how they arrive: "+strings.Join(harness.FlashShapes, ", "))
			fs.DurationVar(&f.Patience, "patience", f.Patience, "how long each buyer waits from its arrival for a final answer")
			fs.IntVar(&f.Retries, "retries", f.Retries, "times a buyer sends a 503 again, after its Retry-After (or a backoff) with jitter, within its patience")
			fs.Float64Var(&f.RetryBudget, "retry-budget", f.RetryBudget, "all buyers' retries together, as a share of the buyers")
			fs.IntVar(&f.Conns, "conns", f.Conns, "connections the buyers share to each replica, as a load balancer's pool (0: a connection per buyer in flight, each dialled afresh)")
			thresholdFlag(fs, c)
		}},
	{name: "serve", summary: "the live page: races run from the browser until Ctrl-C", run: serve,
		scenario: func() harness.Scenario { return harness.DefaultCompare() },
		flags: func(fs *flag.FlagSet, c *options) {
			fs.DurationVar(&c.Duration, "duration", c.Duration, "attack time per strategy")
			fs.StringVar(&c.ServeAddr, "serve-addr", "127.0.0.1:8090", "the address the page listens on")
		},
		finish: func(c *options, _ string, _ map[string]bool) error {
			if _, _, err := net.SplitHostPort(c.ServeAddr); err != nil {
				return fmt.Errorf("--serve-addr %q: give host:port, for example 127.0.0.1:8090", c.ServeAddr)
			}
			return nil
		}},
}

// legacy maps the flags that chose a mode before commands to the command.
var legacy = map[string]string{"capacity": "capacity", "faults": "faults", "soak": "soak", "keyed-drill": "keyed", "serve": "serve"}

// refuseLegacy refuses a flag, or its variable, that chose a command
// before there were commands, with the command line to use instead:
// --faults X is loadtest faults X, --soak D is loadtest soak --duration D.
func refuseLegacy(args []string, getenv func(string) string) error {
	for name, cmd := range legacy {
		if v := getenv(envName(name)); v != "" {
			return fmt.Errorf("%s=%s chose a command before there were commands: use loadtest %s", envName(name), v, cmd)
		}
	}
	var line []string
	was := ""
	for i := 0; i < len(args); i++ {
		name, val, hasVal := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if _, ok := legacy[name]; !ok || !strings.HasPrefix(args[i], "-") {
			line = append(line, args[i])
			continue
		} else if was != "" {
			return fmt.Errorf("--%s and --%s: choose one command, loadtest %s or loadtest %s", was, name, legacy[was], legacy[name])
		}
		was = name
		if (name == "faults" || name == "soak") && !hasVal && i+1 < len(args) {
			i, val = i+1, args[i+1]
		}
		if val != "" {
			line = append(line, map[string][]string{"faults": {val}, "soak": {"--duration", val}}[name]...)
		}
	}
	if was == "" {
		return nil
	}
	return fmt.Errorf("--%s chose a command before there were commands: use %s", was, strings.Join(append([]string{"loadtest", legacy[was]}, line...), " "))
}

// ParseConfig parses args (without the program name: a command, or
// compare's flags) with env fallbacks from getenv, and validates
// everything before any request is sent. It returns flag.ErrHelp for
// --help, after writing the usage to out.
func ParseConfig(args []string, getenv func(string) string, out io.Writer) (options, error) {
	cmd := commands[0]
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if err := refuseLegacy(args, getenv); err != nil {
			return options{}, err
		}
	} else {
		k := slices.IndexFunc(commands, func(c command) bool { return c.name == args[0] })
		if k < 0 {
			return options{}, fmt.Errorf("unknown command %q: see --help for the commands", args[0])
		}
		cmd, args = commands[k], args[1:]
	}
	c := options{cmd: cmd, Config: harness.Defaults(cmd.scenario())}
	fs := cmd.flagSet(&c)
	fs.Usage = func() { cmd.usage(fs) }

	// Parse quietly: a bad flag gets one clear line from the caller, --help
	// the usage. A positional argument may stand among the flags.
	fs.SetOutput(io.Discard)
	var arg string
	err := fs.Parse(args)
	for ; err == nil && fs.NArg() > 0; err = fs.Parse(fs.Args()[1:]) {
		if arg != "" || cmd.args == "" {
			return c, fmt.Errorf("unexpected argument %q (loadtest %s takes%s --flags; see --help)", fs.Arg(0), cmd.name, cmd.args)
		}
		arg = fs.Arg(0)
	}
	fs.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		fs.Usage()
		return c, err
	}
	if err != nil {
		return c, notDefined(err, cmd.name)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if v := getenv(envName(f.Name)); !set[f.Name] && v != "" && envErr == nil {
			if envErr = fs.Set(f.Name, v); envErr != nil {
				envErr = fmt.Errorf("%s=%q: %v", envName(f.Name), v, envErr)
			}
			set[f.Name] = true
		}
	})
	if arg == "" && cmd.args != "" {
		arg = getenv("LOADTEST_" + strings.TrimSpace(cmd.args))
	}
	if envErr != nil {
		return c, envErr
	}
	if cmd.finish != nil {
		if err := cmd.finish(&c, arg, set); err != nil {
			return c, err
		}
	}
	// What the scenario derives from other settings (a soak's stock from
	// the rate, a drill's timeout from the lock TTL) follows what was
	// parsed, unless set.
	d := c.Config
	c.Scenario.Defaults(&d)
	derived := cmd.flagSet(&options{Config: d})
	fs.VisitAll(func(f *flag.Flag) {
		if v := derived.Lookup(f.Name).DefValue; !set[f.Name] && v != f.DefValue {
			_ = fs.Set(f.Name, v)
		}
	})
	// The replicas the harness starts get a token of their own.
	if c.AdminToken == "" && len(c.Replicas) == 0 {
		c.AdminToken = rand.Text()
	}
	var errs []error
	c.Check(func(format string, a ...any) { errs = append(errs, fmt.Errorf(worded(format, fs), a...)) })
	for _, f := range []string{"local-replicas", "rmw-delay", "stock-bin", "replica-log"} {
		if set[f] && len(c.Replicas) > 0 {
			errs = append(errs, fmt.Errorf("--%s applies only to the replicas the harness starts itself; drop it or drop --replicas", f))
		}
	}
	return c, errors.Join(errs...)
}

// notDefined words the flag package's error as the help does (two
// dashes), and names the commands a flag of another command belongs to.
func notDefined(err error, cmd string) error {
	msg := strings.Replace(err.Error(), "for flag -", "for --", 1)
	name, ok := strings.CutPrefix(msg, "flag provided but not defined: -")
	var in []string
	for _, c := range commands {
		if ok && c.flagSet(&options{}).Lookup(name) != nil {
			in = append(in, "loadtest "+c.name)
		}
	}
	if len(in) == 0 {
		return errors.New(strings.Replace(msg, "defined: -", "defined: --", 1))
	}
	return fmt.Errorf("--%s does not apply to loadtest %s: it belongs to %s", name, cmd, strings.Join(in, ", "))
}

// flagSet is the command's flags, bound to c and a fresh scenario, with
// c's settings and the scenario's options as their defaults.
func (cmd command) flagSet(c *options) *flag.FlagSet {
	c.Scenario = cmd.scenario()
	fs := flag.NewFlagSet("loadtest "+cmd.name, flag.ContinueOnError)
	sharedFlags(fs, c)
	cmd.flags(fs, c)
	return fs
}

// help holds the commands' --help texts: help/<command>.txt and the
// parts they share.
//
//go:embed help
var help embed.FS

func (cmd command) usage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprintf(w, "Usage: go run ./loadtest %s [flags]%s\n\nCommands (compare when none is given; COMMAND --help shows its flags):\n", cmd.name, cmd.args)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	safe := func(safe bool) string {
		return strings.Join(strategy.NamesOf(func(in strategy.Info) bool { return in.Safe == safe }), ", ")
	}
	fill := strings.NewReplacer("{faults}", strings.Join(drill.Names(), ", "), "{metrics}", report.Metrics(), "{safe}", safe(true), "{unsafe}", safe(false))
	for _, part := range []string{cmd.name, "history", map[bool]string{true: "threshold"}[fs.Lookup("threshold") != nil], "exit"} {
		if text, err := help.ReadFile("help/" + part + ".txt"); err == nil {
			fmt.Fprint(w, "\n"+fill.Replace(string(text)))
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		if name != "" {
			name = " " + name
		}
		fmt.Fprintf(w, "  --%s%s  [%s]\n    \t%s", f.Name, name, envName(f.Name), usage)
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
	text, _ := help.ReadFile("help/stores.txt")
	fmt.Fprint(w, string(text))
}

// options are the command line's settings: a harness run, or the live
// page that starts harness runs.
type options struct {
	harness.Config
	cmd          command
	ServeAddr    string
	CheckHistory string // a saved history to check, instead of a harness run
}

// fieldNames matches the Go names of fields in a message: Rate,
// Capacity.P99.
var fieldNames = regexp.MustCompile(`\b[A-Z][A-Za-z0-9]*(\.[A-Z][A-Za-z0-9]*)?\b`)

// fieldFlags are the fields whose flag is not their name in lower case
// with dashes (Capacity.P99 is --capacity-p99), or a phrase for a field no
// flag sets.
var fieldFlags = map[string]string{"ReadyWait": "--ready-timeout", "Thresholds": "--threshold", "OutDir": "--out", "Faults": "loadtest faults", "Purchases": "--requests"}

// worded is a problem's format with the fields it names worded as fs's
// flags that set them (RMWDelay is --rmw-delay).
func worded(format string, fs *flag.FlagSet) string {
	return fieldNames.ReplaceAllStringFunc(format, func(name string) string {
		word := fieldFlags[name]
		fs.VisitAll(func(f *flag.Flag) {
			if word == "" && strings.ReplaceAll(f.Name, "-", "") == strings.ToLower(strings.ReplaceAll(name, ".", "")) {
				word = "--" + f.Name
			}
		})
		return cmp.Or(word, name)
	})
}

func sharedFlags(fs *flag.FlagSet, c *options) {
	fs.Func("replicas", "comma-separated base URLs of running replicas, e.g. http://127.0.0.1:8081,http://127.0.0.1:8082; each gets an equal share of the rate and workers. Empty: start --local-replicas replicas", func(v string) (err error) {
		c.Replicas, err = harness.ParseReplicas(v)
		return err
	})
	fs.Func("strategies", "comma-separated strategies to run, in order; \"all\" for every one (the default; loadtest checkout: those that take holds; loadtest flash: the hot-sku ones, atomic, batched, buckets, redis-stock)", func(v string) (err error) {
		c.Strategies, err = harness.ParseStrategies(v)
		return err
	})
	fs.IntVar(&c.Rate, "rate", c.Rate, "requests per second per strategy; 0 sends as fast as --max-workers allow")
	fs.IntVar(&c.Stock, "stock", c.Stock, "stock each sku is reset to before each strategy")
	fs.IntVar(&c.Qty, "qty", c.Qty, "units each request asks to buy")
	fs.IntVar(&c.SKUs, "skus", c.SKUs, "number of skus the requests spread over (1: one hot sku)")
	fs.Float64Var(&c.Skew, "skew", 0, "how requests spread over --skus: 0 uniform, or a Zipf exponent > 1 (larger: sku 0 gets more of them)")
	fs.StringVar(&c.SKUPrefix, "sku-prefix", "", "sku name prefix; every strategy gets its own skus <prefix>-<strategy>-<i>. Default: lt-<timestamp>, fresh every run")
	fs.IntVar(&c.Workers, "workers", c.Workers, "initial Vegeta workers (concurrent requests)")
	fs.IntVar(&c.MaxWorkers, "max-workers", c.MaxWorkers, "most Vegeta workers, i.e. requests in flight at once; caps concurrency so that an over-capacity rate degrades instead of collapsing. Each waiting request of a lock strategy polls the lock, so on the embedded store more of them mostly add lock traffic")
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "per-request timeout")
	fs.StringVar(&c.OutDir, "out", "", "output directory for the reports (default reports/<timestamp>)")
	fs.DurationVar(&c.Settle, "settle", c.Settle, "pause after each attack before reading the stock and the ledger back")
	fs.DurationVar(&c.Warmup, "warmup", c.Warmup, "before the first strategy, send atomic decrements of a scratch sku for this long, so that connection pools are warm for every strategy alike; 0 skips it")
	fs.DurationVar(&c.ReadyWait, "ready-timeout", c.ReadyWait, "how long to wait for every replica's /readyz before giving up")
	fs.DurationVar(&c.RMWDelay, "rmw-delay", c.RMWDelay, "replicas the harness starts: pause between reading and writing the stock, which widens the race window of unsafe and local (with 2ms, an idle machine may not show local's race at all)")
	fs.IntVar(&c.LocalReplicas, "local-replicas", c.LocalReplicas, fmt.Sprintf("replicas the harness starts: how many replica processes (REPLICA_ID a, b, c, ...), 1 to %d; each gets an equal share of the rate and workers, and fault drills need at least 2", env.MaxReplicas))
	fs.StringVar(&c.StockBin, "stock-bin", "", "replicas the harness starts: a prebuilt services/stock binary instead of go build")
	fs.BoolVar(&c.ReplicaLog, "replica-log", false, "replicas the harness starts: copy their logs to stderr (they always go to the output directory)")
	fs.BoolVar(&c.Quiet, "quiet", false, "no live progress line")
	fs.StringVar(&c.AdminToken, "admin-token", "", "the replicas' admin token (their ADMIN_TOKEN), sent with every stock reset; replicas the harness starts get a fresh random one when it is empty")
	fs.BoolVar(&c.RedisCluster, "redis-cluster", false, "replicas the harness starts: on a Redis Cluster (REDIS_CLUSTER_ADDRS, else 3 masters + 3 replicas of redis-server on loopback) instead of one Redis; redis-lock runs then report their load by master (use --skus 100 or more to spread it). loadtest faults redis-failover implies it (see docs/redis-cluster.md)")
	fs.DurationVar(&c.ReadEvery, "read-every", c.ReadEvery, "a separate client reads each sku's stock (GET, replicas in turn) this often during the attack, so that the history has reads; 0: no reads")
	fs.DurationVar(&c.CheckTimeout, "check-timeout", c.CheckTimeout, "the linearizability checker's time budget per sku; when it runs out the verdict is unknown, never a pass")
}

// thresholdFlag is --threshold: each use adds the comma-separated
// thresholds it gives.
func thresholdFlag(fs *flag.FlagSet, c *options) {
	fs.Func("threshold", "a bound on a figure of every run, or of one strategy's runs, as k6 writes them: p99<300ms, sales_per_s>=150, atomic:oversold==0; repeatable, or comma-separated. A breach is a failed check: exit status 3 (see the metrics above)", func(v string) error {
		for f := range strings.SplitSeq(v, ",") {
			th, err := report.ParseThreshold(f)
			if err != nil {
				return err
			}
			c.Thresholds = append(c.Thresholds, th)
		}
		return nil
	})
}

func drillFlags(fs *flag.FlagSet, d *harness.Drills) {
	fs.DurationVar(&d.FaultTTL, "fault-ttl", d.FaultTTL, "the replicas' lock TTL (a crashed holder's lease lasts this long; a pause lasts twice this)")
	fs.StringVar(&d.RedisAOF, "redis-aof", d.RedisAOF, "the appendfsync policy ("+strings.Join(drill.AOFPolicies, ", ")+") of the redis-restart drill that kills redis-server (-9) and starts it on its append-only file, under redis-stock acknowledging after Redis")
	fs.DurationVar(&d.WriteStall, "write-stall", d.WriteStall, "the replicas' --write-stall, a sleep after the lease check and before the stock write, deaf to the lease: most of a lock holder's time, so that a pause lands there and the fence (not the lease check) must refuse the late write")
}
