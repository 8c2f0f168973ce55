// Command loadtest is stocklock's load harness: it hammers the stock
// service's decrement endpoint on two (or more) replicas with Vegeta, one
// strategy after another, and proves or disproves that each sells every
// unit at most once. It parses flags into a harness.Config and renders the
// harness's events and report; the work is done by loadtest/harness and the
// packages it drives (see docs/harness.md).
//
//	go run ./loadtest            # the whole scenario: stores, two replicas, every strategy
//	go run ./loadtest --help     # every flag
//	go run ./loadtest --replicas http://127.0.0.1:8081,http://127.0.0.1:8082
//	go run ./loadtest --faults all            # fault drills
//	go run ./loadtest --capacity              # each strategy's capacity
//	go run ./loadtest --serve                 # the live page
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/stocklock/stocklock/loadtest/harness"
	"github.com/stocklock/stocklock/loadtest/live"
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
	if cfg.Serve {
		return serve(ctx, cfg, stderr)
	}
	rep, err := harness.New(cfg.Config, harness.Terminal(stderr, cfg.Quiet)).Run(ctx)
	if rep != nil && len(rep.Runs) > 0 {
		fmt.Fprintln(stdout)
		_ = report.WriteText(stdout, *rep)
		fmt.Fprintln(stdout)
	}
	if rep != nil && cfg.KeyedDrill {
		return finishKeyed(ctx, rep, stdout, stderr, err, began)
	}
	if rep != nil {
		rep.WallSeconds = time.Since(began).Seconds()
		finish(rep, cfg.Config, stdout, stderr, err)
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
		if ok, _ := harness.Summarize(rep.Runs); !ok || (rep.Soak != nil && len(rep.Soak.Problems) > 0) {
			return exitAnomaly
		}
	}
	if err != nil {
		return exitError
	}
	return exitOK
}

// finish writes the report files and says where they went and what the
// verdict is.
func finish(rep *report.Report, cfg harness.Config, stdout, stderr io.Writer, runErr error) {
	dir := rep.OutDir
	ok, lines := harness.Summarize(rep.Runs)
	rep.OK = ok && runErr == nil && (rep.Soak == nil || len(rep.Soak.Problems) == 0)
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
	if rep.Soak != nil {
		var table bytes.Buffer
		_ = report.WriteSoakTable(&table, *rep.Soak)
		_, _ = stdout.Write(table.Bytes())
		fmt.Fprintln(stdout)
		// The soak's resources go under the segments' table in the
		// Markdown report.
		if f, err := os.OpenFile(filepath.Join(dir, report.MarkdownFile), os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintf(f, "\n## Soak: the replicas' resources\n\n```\n%s```\n\n![soak](%s)\n", table.String(), report.SoakChartFile)
			_ = f.Close()
		}
		p := filepath.Join(dir, report.SoakChartFile)
		if f, err := os.Create(p); err == nil {
			if err := report.WriteSoakSVG(f, *rep.Soak); err == nil {
				paths = append(paths, p)
			}
			_ = f.Close()
		}
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
	case rep.Soak != nil && len(rep.Soak.Problems) > 0:
		fmt.Fprintf(stdout, "FAIL: a replica's resources grew without bound during the soak (%.1fs).\n", rep.WallSeconds)
	case rep.OK:
		fmt.Fprintf(stdout, "PASS: no safe strategy oversold, lost an update, disagreed with the ledger or had a history that is not linearizable (%.1fs).\n", rep.WallSeconds)
	default:
		fmt.Fprintf(stdout, "FAIL: a safe strategy oversold, lost an update, disagreed with the ledger or had a history that is not linearizable (%.1fs).\n", rep.WallSeconds)
	}
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

// serve runs the live page until ctx ends.
func serve(ctx context.Context, cfg options, log io.Writer) int {
	fmt.Fprintln(log, "starting the live page's stores and replicas...")
	srv, err := live.Start(ctx, live.Options{Base: cfg.Config, OutDir: cfg.OutDir, Log: log, DocsDir: docsDir()})
	if err != nil {
		fmt.Fprintf(log, "loadtest: --serve: %v\n", err)
		return exitError
	}
	defer srv.Close()
	if err := srv.Serve(ctx, cfg.ServeAddr, log); err != nil {
		fmt.Fprintf(log, "loadtest: --serve: %v\n", err)
		return exitError
	}
	fmt.Fprintln(log, "loadtest: stopped the live page and everything it started")
	return exitOK
}

// docsDir is the repository's docs directory when the harness runs from the
// repository, else "".
func docsDir() string {
	if st, err := os.Stat("docs"); err == nil && st.IsDir() {
		abs, _ := filepath.Abs("docs")
		return abs
	}
	return ""
}

// finishKeyed prints and writes the keyed drill's runs and returns the
// exit status: an anomaly if any run sold a purchase other than once.
func finishKeyed(ctx context.Context, rep *report.Report, stdout, stderr io.Writer, runErr error, began time.Time) int {
	rep.WallSeconds = time.Since(began).Seconds()
	ok := runErr == nil
	for _, r := range rep.Keyed {
		ok = ok && r.OK()
	}
	rep.OK = ok
	if len(rep.Keyed) > 0 {
		fmt.Fprintln(stdout)
		_ = report.WriteKeyedTable(stdout, rep.Keyed)
		fmt.Fprintln(stdout)
		var md bytes.Buffer
		_ = report.WriteKeyedMarkdown(&md, rep.Keyed)
		js, _ := json.MarshalIndent(rep, "", "  ")
		for name, b := range map[string][]byte{report.MarkdownFile: md.Bytes(), report.JSONFile: js} {
			if err := os.WriteFile(filepath.Join(rep.OutDir, name), b, 0o644); err != nil {
				fmt.Fprintf(stderr, "loadtest: writing the reports: %v\n", err)
			}
		}
		fmt.Fprintf(stdout, "Reports in %s: %s, %s\n", rep.OutDir, report.MarkdownFile, report.JSONFile)
	}
	if runErr != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "loadtest: interrupted; everything it started has been stopped")
		} else {
			fmt.Fprintf(stderr, "loadtest: %v\n", runErr)
		}
	}
	for _, r := range rep.Keyed {
		if !r.OK() {
			fmt.Fprintf(stdout, "FAIL: a keyed purchase did not sell exactly once (%.1fs).\n", rep.WallSeconds)
			return exitAnomaly
		}
	}
	if runErr != nil {
		return exitError
	}
	fmt.Fprintf(stdout, "PASS: every keyed purchase sold exactly once, through a kill -9 and a freeze (%.1fs).\n", rep.WallSeconds)
	return exitOK
}
