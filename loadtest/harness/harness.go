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

	"github.com/stocklock/stocklock/loadtest/drill"
	"github.com/stocklock/stocklock/loadtest/env"
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

// use points the harness at the replicas of bases, the i-th called id(i).
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
