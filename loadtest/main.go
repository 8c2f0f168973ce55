// Command loadtest is stocklock's load harness: it hammers the stock
// service's decrement endpoint on two (or more) replicas with Vegeta, one
// strategy after another, and proves or disproves that each sells every
// unit at most once.
//
//	go run ./loadtest            # the whole scenario: stores, two replicas, every strategy
//	go run ./loadtest --help     # every flag
//	go run ./loadtest --replicas http://127.0.0.1:8081,http://127.0.0.1:8082
//
// See ParseConfig's usage text for the flags and report for the output.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/stocklock/stocklock/loadtest/report"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses.
const (
	exitOK      = 0 // every safe strategy clean
	exitAnomaly = 1 // a safe strategy oversold, lost an update or disagreed with the ledger
	exitError   = 2 // bad flags, or the harness could not do its job
)

// run is main without the process: it returns the exit status.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	began := time.Now()
	cfg, err := ParseConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "loadtest: %v\nRun with --help to see every flag.\n", err)
		return exitError
	}
	if cfg.CheckHistory != "" {
		return checkSaved(cfg.CheckHistory, cfg.CheckTimeout, stdout, stderr)
	}
	rep, err := execute(ctx, cfg, stderr)
	if rep != nil && len(rep.Runs) > 0 {
		fmt.Fprintln(stdout)
		if rep.IsFault() {
			_ = report.WriteFaultTable(stdout, report.FaultRows(rep.Runs))
		} else {
			_ = report.WriteTable(stdout, rep.Runs)
		}
		fmt.Fprintln(stdout)
	}
	if rep != nil {
		rep.WallSeconds = time.Since(began).Seconds()
		finish(rep, cfg, stdout, stderr, err)
	}
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "loadtest: interrupted; everything it started has been stopped")
		} else {
			fmt.Fprintf(stderr, "loadtest: %v\n", err)
		}
	}
	// A safe strategy's anomaly is the finding that matters most: it
	// decides the status even if the harness broke down afterwards.
	if rep != nil {
		if ok, _ := summarize(rep.Runs); !ok {
			return exitAnomaly
		}
	}
	if err != nil {
		return exitError
	}
	return exitOK
}

// outDirFor returns the output directory: --out, or reports/<timestamp>.
func outDirFor(cfg Config, now time.Time) string {
	if cfg.OutDir != "" {
		return cfg.OutDir
	}
	return filepath.Join("reports", now.Format("20060102-150405"))
}

// execute runs the whole comparison. It returns the report so far even on
// error (nil only when not even the output directory could be made).
func execute(ctx context.Context, cfg Config, log io.Writer) (*report.Report, error) {
	now := time.Now()
	outDir := outDirFor(cfg, now)
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, fmt.Errorf("output directory: %w", err)
	}
	if abs, err := filepath.Abs(outDir); err == nil {
		outDir = abs
	}
	rep := &report.Report{
		Started: now,
		OutDir:  outDir,
		Host:    hostText(),
		Settings: report.Settings{
			Rate: cfg.Rate, Duration: cfg.Duration.String(), Requests: cfg.Requests,
			Stock: cfg.Stock, Qty: cfg.Qty, SKUs: cfg.SKUs, Skew: cfg.Skew,
			Workers: cfg.Workers, MaxWorkers: cfg.MaxWorkers, Timeout: cfg.Timeout.String(),
			Strategies: cfg.Strategies,
		},
	}
	fmt.Fprintf(log, "stocklock load test: %s; reports go to %s\n", strings.Join(cfg.Strategies, ", "), outDir)

	replicas := cfg.Replicas
	var env *localEnv
	if len(replicas) == 0 {
		var err error
		env, err = startLocal(ctx, cfg, outDir, log)
		if err != nil {
			return rep, err
		}
		defer env.Close()
		replicas = env.Replicas
		rep.Store, rep.Redis, rep.Etcd = env.Store, env.Redis, env.Etcd
		rep.Settings.RMWDelay = cfg.RMWDelay.String()
	} else {
		fmt.Fprintf(log, "waiting for %s/readyz...\n", strings.Join(replicas, "/readyz, "))
		err := newAPI(5*time.Second, "").waitReady(ctx, replicas, cfg.ReadyWait, func(s string) { fmt.Fprintf(log, "  %s\n", s) })
		if err != nil {
			return rep, err
		}
	}
	rep.Replicas = replicas

	prefix := cfg.SKUPrefix
	if prefix == "" {
		var b [3]byte
		_, _ = rand.Read(b[:])
		prefix = "lt-" + now.Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
	}
	h := &harness{
		cfg:      cfg,
		replicas: replicas,
		outDir:   outDir,
		prefix:   prefix,
		api:      newAPI(cfg.Timeout+15*time.Second, cfg.AdminToken),
		probe:    newAPI(time.Second, ""),
		reader:   newAPI(5*time.Second, ""),
		log:      log,
		tty:      isTerminal(log),
	}
	var (
		runs []report.Run
		err  error
	)
	if len(cfg.Faults) > 0 {
		rep.Settings.Faults, rep.Settings.Repeat = cfg.Faults, cfg.Repeat
		rep.Settings.FaultTTL, rep.Settings.WriteStall = cfg.FaultTTL.String(), cfg.WriteStall.String()
		runs, err = h.runFaults(ctx, env)
	} else {
		runs, err = h.runAll(ctx)
	}
	rep.Runs = runs
	return rep, err
}

// finish writes the report files and says where they went and what the
// verdict is.
func finish(rep *report.Report, cfg Config, stdout, stderr io.Writer, runErr error) {
	dir := rep.OutDir
	ok, lines := summarize(rep.Runs)
	rep.OK = ok && runErr == nil
	if len(rep.Runs) == 0 {
		_ = os.Remove(dir) // nothing measured; removes the directory only if empty
		return
	}
	for _, l := range lines {
		fmt.Fprintln(stdout, l)
	}
	fmt.Fprintln(stdout)
	paths, err := report.WriteFiles(dir, *rep)
	if err != nil {
		fmt.Fprintf(stderr, "loadtest: writing the reports: %v\n", err)
	}
	var plots []string
	for _, r := range rep.Runs {
		if r.Plot != "" {
			plots = append(plots, r.Plot)
		}
	}
	if rep.Store != "" {
		fmt.Fprintf(stdout, "MongoDB: %s\nRedis: %s\n", rep.Store, rep.Redis)
		if rep.Etcd != "" {
			fmt.Fprintf(stdout, "etcd: %s\n", rep.Etcd)
		}
	}
	fmt.Fprintf(stdout, "Reports in %s:\n", dir)
	for _, p := range paths {
		fmt.Fprintf(stdout, "  %s\n", filepath.Base(p))
	}
	if len(plots) > 0 {
		fmt.Fprintf(stdout, "  %s (Vegeta latency plots)\n", strings.Join(plots, ", "))
	}
	var histories, pictures []string
	for _, r := range rep.Runs {
		if r.History != "" {
			histories = append(histories, r.History)
		}
		pictures = append(pictures, r.Violations...)
	}
	if len(histories) > 0 {
		fmt.Fprintf(stdout, "  %s (histories: go run ./loadtest --check-history FILE checks one again)\n", summarizeNames(histories))
	}
	if len(pictures) > 0 {
		fmt.Fprintf(stdout, "  %s (pictures of the linearizability violations)\n", strings.Join(pictures, ", "))
	}
	switch {
	case runErr != nil:
		fmt.Fprintf(stdout, "Incomplete run (%d of %d strategies) after %.1fs.\n", len(rep.Runs), len(cfg.Strategies), rep.WallSeconds)
	case rep.OK:
		fmt.Fprintf(stdout, "PASS: no safe strategy oversold, lost an update, disagreed with the ledger or had a history that is not linearizable (%.1fs).\n", rep.WallSeconds)
	default:
		fmt.Fprintf(stdout, "FAIL: a safe strategy oversold, lost an update, disagreed with the ledger or had a history that is not linearizable (%.1fs).\n", rep.WallSeconds)
	}
}

func hostText() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%s, %s/%s, %d CPUs, %s", h, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// summarizeNames lists a few names, and how many more: fault drills write
// a history each.
func summarizeNames(names []string) string {
	const most = 4
	if len(names) <= most {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:most], ", "), len(names)-most)
}
