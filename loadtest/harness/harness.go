// Package harness is stocklock's load harness as a library: for one Config
// it starts the environment (or uses given replicas) and runs its
// Scenario (the comparison, fault drills, ...): it resets the stock,
// attacks, reads the stock and the ledger back, checks the history for
// linearizability and judges every run. It reports as it goes through a
// stream of Events, which the command line renders as progress lines and
// the live page as charts, and returns the report.Report both render.
package harness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stocklock/stocklock/loadtest/attack"
	"github.com/stocklock/stocklock/loadtest/drill"
	"github.com/stocklock/stocklock/loadtest/env"
	"github.com/stocklock/stocklock/loadtest/history"
	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/loadtest/verdict"
	"github.com/stocklock/stocklock/pkg/stockclient"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// Harness runs the strategies of one Config against a set of replicas.
// Create it with New; Run runs it once. Inject may be called from another
// goroutine while it runs.
type Harness struct {
	cfg  Config
	sink Sink
	// given is the environment of WithEnv, run against instead of
	// starting one; it is not closed. env is the environment of the run
	// under way: given, or the one Run started.
	given, env *env.Env

	replicas      []string
	ids           map[string]string // replica id by base URL
	replicaIDs    []string          // in the order of replicas
	outDir        string
	prefix        string // sku prefix of this harness run
	api           *stockclient.Client
	probe         *stockclient.Client // asks the replicas' /healthz who holds a lock, in fault drills
	reader        *stockclient.Client // the separate client whose reads of the stock go into the history
	drills        int                 // numbers the fault runs, so that each gets skus of its own
	runNo         int                 // numbers the runs, for the events
	metricsWarned bool                // a replica's /metrics could not be read: noted once
	views         bool                // sample redis-stock's copies and queued's log for the events (WithViews)

	mu     sync.Mutex
	adhoc  chan string // faults asked for by Inject, while an attack runs
	active bool        // an attack is under way
}

// Option changes how New makes a Harness.
type Option func(*Harness)

// WithEnv runs the harness against e instead of starting an environment
// of its own (the live page keeps one across runs). Run does not close it.
func WithEnv(e *env.Env) Option { return func(h *Harness) { h.given = e } }

// New returns a harness for cfg that reports to sink (nil: nowhere). cfg
// must have passed Validate.
func New(cfg Config, sink Sink, opts ...Option) *Harness {
	if sink == nil {
		sink = func(Event) {}
	}
	h := &Harness{cfg: cfg, sink: sink, adhoc: make(chan string, 1)}
	for _, o := range opts {
		o(h)
	}
	return h
}

// Errors of Inject.
var (
	ErrNotRunning   = errors.New("no attack is running")
	ErrUnknownFault = errors.New("unknown fault")
	ErrBusy         = errors.New("a fault is already being injected")
)

// Inject strikes the running attack with the fault called name, one of
// drill.Catalogue's with an injector, now: the victim is the replica
// holding the lock at that moment. The fault and its effect appear in the
// events and in the run's report.
func (h *Harness) Inject(name string) error {
	f, ok := drill.Lookup(name)
	if !ok || f.Inject == nil {
		return fmt.Errorf("%w %q", ErrUnknownFault, name)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.active || h.env == nil {
		return ErrNotRunning
	}
	select {
	case h.adhoc <- name:
		return nil
	default:
		return ErrBusy
	}
}

// setEnv sets the environment of the run under way; Inject reads it.
func (h *Harness) setEnv(e *env.Env) {
	h.mu.Lock()
	h.env = e
	h.mu.Unlock()
}

func (h *Harness) setActive(on bool) {
	h.mu.Lock()
	h.active = on
	if !on {
		select { // an injection asked for too late is dropped
		case <-h.adhoc:
		default:
		}
	}
	h.mu.Unlock()
}

func (h *Harness) logf(format string, a ...any) {
	h.emit(Event{Type: EventLog, Text: fmt.Sprintf(format, a...)})
}

func (h *Harness) emit(ev Event) {
	if ev.At.IsZero() {
		ev.At = time.Now()
	}
	h.sink(ev)
}

// Run runs the config's scenario. It returns the report so far even on
// error (nil only when not even the output directory could be made). The
// report's files are not written: see report.WriteFiles.
func (h *Harness) Run(ctx context.Context) (rep *report.Report, err error) {
	cfg := h.cfg
	now := time.Now()
	h.outDir = cmp.Or(cfg.OutDir, filepath.Join("reports", now.Format("20060102-150405")))
	if err := os.MkdirAll(h.outDir, 0o755); err != nil {
		return nil, fmt.Errorf("output directory: %w", err)
	}
	if abs, err := filepath.Abs(h.outDir); err == nil {
		h.outDir = abs
	}
	host, _ := os.Hostname()
	rep = &report.Report{
		Started: now,
		OutDir:  h.outDir,
		Host:    fmt.Sprintf("%s, %s/%s, %d CPUs, %s", host, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version()),
		Settings: report.Settings{
			Rate: cfg.Rate, Duration: cfg.Duration.String(), Requests: cfg.Requests,
			Stock: cfg.Stock, Qty: cfg.Qty, SKUs: cfg.SKUs, Skew: cfg.Skew,
			Workers: cfg.Workers, MaxWorkers: cfg.MaxWorkers, Timeout: cfg.Timeout.String(),
			Strategies: cfg.Strategies,
		},
	}
	for _, t := range cfg.Thresholds {
		rep.Settings.Thresholds = append(rep.Settings.Thresholds, t.String())
	}
	defer func() {
		rep.WallSeconds = time.Since(now).Seconds()
		rep.OK = err == nil && verdict.Judge(rep.Checks()) == verdict.Passed
	}()
	h.logf("stocklock load test: %s; reports go to %s", strings.Join(cfg.Strategies, ", "), h.outDir)
	h.setEnv(h.given)
	if h.given == nil && len(cfg.Replicas) == 0 {
		e, err := env.Start(ctx, EnvOptions(cfg, h.outDir, logWriter{h}))
		if err != nil {
			return rep, err
		}
		h.setEnv(e)
		defer func() {
			h.setEnv(nil)
			e.Close()
		}()
	}
	if len(cfg.Replicas) == 0 {
		rep.Store, rep.Redis, rep.Etcd = h.env.Store, h.env.RedisText, h.env.EtcdText
		rep.Settings.RMWDelay = cfg.RMWDelay.String()
		h.use(h.env.Bases(), env.ReplicaID)
	} else {
		h.logf("waiting for %s/readyz...", strings.Join(cfg.Replicas, "/readyz, "))
		err := stockclient.New("", stockclient.WithTimeout(5*time.Second)).WaitReady(ctx, cfg.Replicas, cfg.ReadyWait, func(s string) { h.logf("  %s", s) })
		if err != nil {
			return rep, err
		}
		h.use(cfg.Replicas, func(i int) string { return fmt.Sprintf("r%d", i+1) })
	}
	rep.Replicas = h.replicas
	h.prefix = cmp.Or(cfg.SKUPrefix, fmt.Sprintf("lt-%s-%06x", now.Format("20060102-150405"), rand.IntN(1<<24)))
	h.api = stockclient.New("", stockclient.WithTimeout(cfg.Timeout+15*time.Second), stockclient.WithAdminToken(cfg.AdminToken))
	h.probe = stockclient.New("", stockclient.WithTimeout(time.Second))
	h.reader = stockclient.New("", stockclient.WithTimeout(5*time.Second))
	h.emit(Event{Type: EventSetup, Replicas: h.replicaIDs, Text: strings.Join(h.replicas, " ")})

	// A store that stops answering ends the run with a named error and its
	// log (env.ErrStoreNotAnswering), instead of a run that waits out the
	// timeouts of every request and then fails on an admin call.
	if h.env != nil && h.env.Mongo != nil {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		go h.env.WatchStore(ctx, env.StoreWatchLimit, h.logf, cancel)
	}
	err = cfg.scenario().Run(ctx, h, rep)
	if cause := context.Cause(ctx); errors.Is(cause, env.ErrStoreNotAnswering) {
		return rep, cause
	}
	return rep, err
}

func (h *Harness) use(bases []string, id func(int) string) {
	h.replicas, h.ids, h.replicaIDs = bases, map[string]string{}, make([]string, len(bases))
	for i, b := range bases {
		h.replicaIDs[i] = id(i)
		h.ids[b] = h.replicaIDs[i]
	}
}

// EnvOptions are the options of the environment cfg asks for, its logs
// in outDir and its progress lines to log.
func EnvOptions(cfg Config, outDir string, log io.Writer) env.Options {
	o := env.Options{
		Replicas: cfg.LocalReplicas, StockBin: cfg.StockBin, OutDir: outDir, Log: log, ReplicaLog: cfg.ReplicaLog,
		ReadyWait: cfg.ReadyWait, AdminToken: cfg.AdminToken, Flags: []string{"--rmw-delay", cfg.RMWDelay.String()},
		RedisCluster: cfg.RedisCluster,
		// A strategy that takes its leases from the redlock servers.
		Redlock: slices.ContainsFunc(cfg.Strategies, func(name string) bool {
			in, ok := strategy.Lookup(name)
			return ok && in.Lock == strategy.LockRedlock
		}),
	}
	cfg.scenario().Env(cfg, &o)
	return o
}

type logWriter struct{ h *Harness }

func (w logWriter) Write(b []byte) (int, error) {
	for line := range strings.SplitSeq(strings.TrimRight(string(b), "\n"), "\n") {
		w.h.emit(Event{Type: EventLog, Text: line})
	}
	return len(b), nil
}

// runTag names strategy's run in its skus and files; drill > 0 numbers a
// fault run, which gets skus of its own (a strategy runs under several faults).
func runTag(strategy string, drill int) string {
	if drill > 0 {
		return fmt.Sprintf("%s-f%d", strategy, drill)
	}
	return strategy
}

func (h *Harness) skus(strategy string, drill int) []string {
	out := make([]string, h.cfg.SKUs)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%s-%d", h.prefix, runTag(strategy, drill), i)
	}
	return out
}

// scrape reads every replica's /metrics through parse (parseLockWait,
// parseSaleSteps); zero entries where a replica's could not be read.
func scrape[T any](ctx context.Context, h *Harness, parse func([]byte) T) []T {
	out := make([]T, len(h.replicas))
	for i, base := range h.replicas {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		text, err := h.api.At(base).Metrics(cctx)
		cancel()
		if err != nil {
			if !h.metricsWarned {
				h.metricsWarned = true
				h.logf("note: no metrics from %s: %v", base, err)
			}
			continue
		}
		out[i] = parse(text)
	}
	return out
}

// salesRate is the rate at which sales completed while the stock lasted:
// k sales over the time from the attack's start to the completion of the
// k-th, where k is 95% of the sales (all of them when there are fewer than
// 20), so that one straggler (a slow response, a pause on a busy machine)
// does not stretch the window. Counting from the start, not from the first
// sale, keeps it at or below the offered rate: the k-th sale cannot finish
// before the k-th request was sent.
func salesRate(sales []drill.Sale, start time.Time) float64 {
	if len(sales) == 0 {
		return 0
	}
	sorted := slices.SortedFunc(slices.Values(sales), func(a, b drill.Sale) int { return a.End.Compare(b.End) })
	k := len(sorted)
	if k >= 20 {
		k = (k*95 + 99) / 100
	}
	if d := sorted[k-1].End.Sub(start).Seconds(); d > 0 {
		return float64(k) / d
	}
	return 0
}

// warmup sends atomic decrements of a scratch sku for cfg.Warmup, so
// that the replicas' connection pools (to MongoDB, to Redis, from the
// harness) are open before the first measured run, which would otherwise
// pay for them alone. The results are discarded.
func (h *Harness) warmup(ctx context.Context) error {
	if h.cfg.Warmup <= 0 {
		return nil
	}
	sku := h.prefix + "-warmup"
	if _, err := h.api.At(h.replicas[0]).PutItem(ctx, sku, MaxStock); err != nil {
		return fmt.Errorf("warm-up: reset stock: %w", err)
	}
	rate := cmp.Or(h.cfg.Rate, 100)
	h.logf("warming up: %s of atomic decrements on %s at %d req/s...", h.cfg.Warmup, sku, rate)
	atk, err := attack.Start(ctx, attack.Options{
		Name: "warmup", Targets: h.replicas, SKUs: []string{sku}, Writers: []string{strategy.Atomic}, Qty: 1,
		Rate: max(rate, len(h.replicas)), Duration: h.cfg.Warmup, Timeout: h.cfg.Timeout,
		Workers: h.cfg.Workers, MaxWorkers: h.cfg.MaxWorkers,
	})
	if err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	defer atk.Close()
	n, failed := 0, 0
	for r := range atk.Results {
		n++
		if r.Code != 200 {
			failed++
		}
	}
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	h.logf("  warm-up: %d requests, %d not 200", n, failed)
	return nil
}

func (h *Harness) loadText() string {
	rate := fmt.Sprintf("%d req/s", h.cfg.Rate)
	if h.cfg.Rate == 0 {
		rate = fmt.Sprintf("unpaced with %d workers", h.cfg.MaxWorkers)
	}
	switch {
	case h.cfg.Requests > 0 && h.cfg.Duration > 0:
		return fmt.Sprintf("%s, %d requests or %s", rate, h.cfg.Requests, h.cfg.Duration)
	case h.cfg.Requests > 0:
		return fmt.Sprintf("%s, %d requests", rate, h.cfg.Requests)
	default:
		return fmt.Sprintf("%s for %s", rate, h.cfg.Duration)
	}
}

// Summarize returns a line per run that says how it went (a line per
// failed drill or capacity step), then a line per failed check that is
// not a run's safety check (thresholds, the keyed drill, the soak).
func Summarize(rep report.Report) []string {
	var lines []string
	isRun := map[string]bool{}
	for _, r := range rep.Runs {
		isRun[r.Scope()] = true
		switch v := verdict.Outcome(r.Verdict); {
		case v == verdict.Fail:
			lines = append(lines, fmt.Sprintf("FAIL  %s: %s", r.Scope(), strings.Join(r.Problems, "; ")))
		case r.Fault != "" || r.CapacityStep > 0:
			// Fault drills and capacity steps are many: their table
			// says it all, the lines name only the failures.
		case v == verdict.Demonstrated:
			lines = append(lines, fmt.Sprintf("ok    %s: race demonstrated (oversold %d, lost updates %d, ledger mismatch %d, linearizable %s), as expected of an unsafe strategy", r.Strategy, r.Oversold, r.LostUpdates, r.LedgerMismatch, r.Linearizable))
		case v == verdict.NotReproduced:
			lines = append(lines, fmt.Sprintf("ok    %s: race not reproduced in this run (more load, concurrency or --rmw-delay makes it likelier)", r.Strategy))
		default:
			lines = append(lines, fmt.Sprintf("pass  %s (linearizable %s)", r.Strategy, r.Linearizable))
		}
	}
	for _, c := range rep.Checks() {
		// A run's failed safety checks are in its line above.
		if !c.Pass && (c.Kind == verdict.Safety && !isRun[c.Scope] || c.Kind == verdict.Threshold) {
			lines = append(lines, fmt.Sprintf("%-5s %s", strings.ToUpper(c.Result()), c))
		}
	}
	return lines
}

// mixedRun names the one run of --mixed, in which every chosen strategy
// decrements the same skus at once.
const mixedRun = "mixed"

// drainWait bounds the wait for pending orders: a surviving replica's
// periodic recovery writes them within a few seconds.
const drainWait = 30 * time.Second

// waitDrained polls every sku until none has a pending order (a unit taken
// whose order is not yet in the ledger), so that stock and ledger can be
// compared unit for unit. It returns false if some were still pending
// after drainWait.
func (h *Harness) waitDrained(ctx context.Context, base string, skus []string) (bool, error) {
	var err error
	lastNote := time.Now()
	drained := poll(ctx, drainWait, 100*time.Millisecond, func() bool {
		pending := 0
		for _, sku := range skus {
			it, e := h.api.At(base).GetItem(ctx, sku)
			if e != nil {
				err = fmt.Errorf("read the pending orders: %w", e)
				return true
			}
			pending += len(it.Pending)
		}
		if pending > 0 && time.Since(lastNote) >= 2*time.Second {
			lastNote = time.Now()
			h.logf("  waiting for %d pending orders to reach the ledger...", pending)
		}
		return pending == 0
	})
	if !drained && err == nil && ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	return drained && err == nil, err
}

// poll calls done every `every` until it returns true (poll too), patience passes or ctx ends.
func poll(ctx context.Context, patience, every time.Duration, done func() bool) bool {
	for start := time.Now(); !done(); {
		if time.Since(start) > patience || drill.Sleep(ctx, every) != nil {
			return false
		}
	}
	return true
}

// outcomesByStrategy counts the decrements of a history by strategy and
// outcome ("sold", "refused stale_read", ...), retries included.
func outcomesByStrategy(ops []history.Op) map[string]map[string]int {
	out := map[string]map[string]int{}
	for _, op := range ops {
		if op.Kind != history.Decrement {
			continue
		}
		if out[op.Strategy] == nil {
			out[op.Strategy] = map[string]int{}
		}
		k := string(op.Outcome)
		if op.Outcome == history.Refused || op.Outcome == history.Unknown {
			k += " " + op.Error
			if op.Status == 0 {
				k = string(op.Outcome) + " " + attack.TransportKind(op.Error)
			}
		}
		out[op.Strategy][k]++
	}
	return out
}
