// Command loadtest is stocklock's load harness: it hammers the stock
// service's decrement endpoint on two (or more) replicas with Vegeta, one
// strategy after another, and proves or disproves that each sells every
// unit at most once. It parses a command and its flags into a
// harness.Config and renders the harness's events and report; the work is
// done by loadtest/harness and the packages it drives (docs/harness.md).
//
//	go run ./loadtest            # the whole scenario: stores, two replicas, every strategy
//	go run ./loadtest --help     # every flag
//	go run ./loadtest --replicas http://127.0.0.1:8081,http://127.0.0.1:8082
//	go run ./loadtest faults all              # fault drills
//	go run ./loadtest capacity                # each strategy's capacity
//	go run ./loadtest serve                   # the live page
//	go run ./loadtest faults --help           # a command's flags
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/stocklock/stocklock/loadtest/harness"
	"github.com/stocklock/stocklock/loadtest/history"
	"github.com/stocklock/stocklock/loadtest/live"
	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/loadtest/verdict"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var code int
	if os.Getenv(harness.ProbeEnv) != "" {
		code = runProbe(ctx)
	} else {
		harness.ProbeCommand, _ = os.Executable()
		code = run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	}
	stop()
	os.Exit(code)
}

// runProbe is this binary started by a flash sale as its control plane's
// probe (harness.ProbeEnv): a process of its own, apart from the herd.
func runProbe(ctx context.Context) int {
	if err := harness.RunProbe(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		return exitError
	}
	return exitOK
}

// Exit statuses.
const (
	exitOK        = 0 // every check passed
	exitAnomaly   = 1 // a safety check failed: a safe strategy oversold, lost an update, disagreed with the ledger, ...
	exitError     = 2 // bad flags, or the harness could not do its job
	exitThreshold = 3 // every safety check passed, and a --threshold was breached
)

// run is main without the process: it returns the exit status.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, err := ParseConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\nRun with --help to see every flag.\n", strings.TrimSpace("loadtest "+cfg.cmd.name), err)
		return exitError
	}
	if cfg.CheckHistory != "" {
		return checkSaved(cfg.CheckHistory, cfg.CheckTimeout, stdout, stderr)
	}
	if cfg.cmd.run != nil {
		return cfg.cmd.run(ctx, cfg, stdout, stderr)
	}
	rep, err := harness.New(cfg.Config, harness.Terminal(stderr, cfg.Quiet)).Run(ctx)
	status := verdict.Passed
	if rep != nil {
		finish(rep, cfg.Config, stdout, stderr, err)
		status = verdict.Judge(rep.Checks())
	}
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "loadtest: interrupted; everything it started has been stopped")
		} else {
			fmt.Fprintf(stderr, "loadtest: %v\n", err)
		}
	}
	// A failed safety check is the finding that matters most: it decides
	// the status even if the harness broke down afterwards. A threshold
	// is judged only on a complete run.
	switch {
	case status == verdict.Failed:
		return exitAnomaly
	case err != nil:
		return exitError
	case status == verdict.Breached:
		return exitThreshold
	}
	return exitOK
}

// finish prints the table and the summary, writes the report files and
// says where they went and what the verdict is.
func finish(rep *report.Report, cfg harness.Config, stdout, stderr io.Writer, runErr error) {
	dir := rep.OutDir
	if len(rep.Runs) == 0 && len(rep.Keyed) == 0 && len(rep.Checkout) == 0 && len(rep.Flash) == 0 {
		_ = os.Remove(dir) // nothing measured; removes the directory only if empty
		return
	}
	fmt.Fprintln(stdout)
	_ = report.WriteText(stdout, *rep)
	fmt.Fprintln(stdout)
	if lines := harness.Summarize(*rep); len(lines) > 0 {
		fmt.Fprintln(stdout, strings.Join(lines, "\n")+"\n")
	}
	paths, err := report.WriteFiles(dir, *rep)
	if err != nil {
		fmt.Fprintf(stderr, "loadtest: writing the reports: %v\n", err)
	}
	if rep.Store != "" {
		fmt.Fprintf(stdout, "MongoDB: %s\nRedis: %s\n", rep.Store, rep.Redis)
		if rep.Etcd != "" {
			fmt.Fprintf(stdout, "etcd: %s\n", rep.Etcd)
		}
	}
	fmt.Fprintf(stdout, "Reports in %s (%s: all of them in one page):\n", dir, report.HTMLFile)
	for _, p := range paths {
		fmt.Fprintf(stdout, "  %s\n", filepath.Base(p))
	}
	var plots, histories, pictures []string
	for _, r := range rep.Runs {
		plots = append(plots, r.Plot)
		histories = append(histories, r.History)
		pictures = append(pictures, r.Violations...)
	}
	for _, l := range []struct {
		names []string
		what  string
	}{{plots, "Vegeta latency plots"}, {histories, "histories: go run ./loadtest --check-history FILE checks one again"}, {pictures, "pictures of the linearizability violations"}} {
		// Fault drills write a history each: a few names, and how many more.
		if names := slices.DeleteFunc(l.names, func(s string) bool { return s == "" }); len(names) > 4 {
			fmt.Fprintf(stdout, "  %s and %d more (%s)\n", strings.Join(names[:4], ", "), len(names)-4, l.what)
		} else if len(names) > 0 {
			fmt.Fprintf(stdout, "  %s (%s)\n", strings.Join(names, ", "), l.what)
		}
	}
	word, sentence := rep.Headline()
	if runErr != nil && len(rep.Keyed) == 0 {
		sentence += fmt.Sprintf("; %d of %d strategies ran", len(rep.Runs)+len(rep.Checkout)+len(rep.Flash), len(cfg.Strategies))
	}
	fmt.Fprintf(stdout, "%s: %s (%.1fs).\n", word, sentence, rep.WallSeconds)
}

func serve(ctx context.Context, cfg options, _, log io.Writer) int {
	fmt.Fprintln(log, "starting the live page's stores and replicas...")
	// The page serves the repository's docs when the harness runs from it.
	docs, _ := filepath.Abs("docs")
	if st, err := os.Stat("docs"); err != nil || !st.IsDir() {
		docs = ""
	}
	srv, err := live.Start(ctx, live.Options{Base: cfg.Config, OutDir: cfg.OutDir, Log: log, DocsDir: docs})
	if err == nil {
		defer srv.Close()
		err = srv.Serve(ctx, cfg.ServeAddr, log)
	}
	if err != nil {
		fmt.Fprintf(log, "loadtest serve: %v\n", err)
		return exitError
	}
	fmt.Fprintln(log, "loadtest: stopped the live page and everything it started")
	return exitOK
}

// checkSaved checks a history file written by an earlier run and prints
// the verdict per sku; a violation is drawn beside the file, as
// <file without .jsonl>.html, and a short history of one sku as a
// timeline, <file without .jsonl>.svg. It returns the exit status: 0 linearizable,
// 1 not, 2 unknown or unreadable.
func checkSaved(path string, timeout time.Duration, stdout, stderr io.Writer) int {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintf(stderr, "loadtest: --check-history: %v\n", err)
		return exitError
	}
	ops, err := history.ReadJSONL(f)
	_ = f.Close()
	if err != nil {
		fmt.Fprintf(stderr, "loadtest: --check-history %s: %v\n", path, err)
		return exitError
	}
	res := history.Check(ops, timeout)
	for _, s := range res.SKUs {
		fmt.Fprintf(stdout, "%s: linearizable %s (%d operations, checked in %s)\n", s.SKU, s.Verdict, s.Ops, s.Elapsed.Round(time.Millisecond))
		if s.Conflict != "" {
			fmt.Fprintf(stdout, "  %s\n", s.Conflict)
		}
	}
	base := strings.TrimSuffix(path, ".jsonl")
	pics, err := harness.DrawViolations(res, base)
	if err != nil {
		fmt.Fprintf(stderr, "loadtest: %v\n", err)
	}
	for _, p := range pics {
		fmt.Fprintf(stdout, "picture of the violation: %s\n", filepath.Join(filepath.Dir(path), p))
	}
	if len(res.SKUs) == 1 && len(ops) <= maxTimeline {
		var b bytes.Buffer
		_ = history.WriteSVG(&b, ops, res.SKUs[0].SKU) // a bytes.Buffer takes every write
		svg := base + ".svg"
		if err := os.WriteFile(svg, b.Bytes(), 0o666); err != nil {
			fmt.Fprintf(stderr, "loadtest: timeline: %v\n", err)
		} else {
			fmt.Fprintf(stdout, "timeline: %s\n", svg)
		}
	}
	fmt.Fprintf(stdout, "history %s: linearizable %s (%d operations, %s)\n", path, res.Verdict, len(ops), res.Elapsed.Round(time.Millisecond))
	switch res.Verdict {
	case history.Yes:
		return exitOK
	case history.No:
		return exitAnomaly
	default:
		return exitError
	}
}

// maxTimeline is the most operations --check-history draws as a timeline:
// beyond it the labels no longer fit.
const maxTimeline = 60
