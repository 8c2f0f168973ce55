package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stocklock/stocklock/loadtest/harness"
	"github.com/stocklock/stocklock/loadtest/history"
)

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
