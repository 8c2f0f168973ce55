package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The harness's line budget (docs/harness.md, "Its size"): the non-test
// Go lines of loadtest/ for the run modes it had when they became
// scenarios, with the checks, the thresholds and report.html. The
// scenario parts added after it, each in files of its own, are counted
// apart.
const lineBudget = 10_750

var afterBudget = []string{"harness/checkout.go", "report/checkout.go", "harness/redisview.go", "harness/queueview.go", "harness/flash.go", "report/flash.go", "harness/pastknee.go", "report/pastknee.go", "harness/probe.go", "live/flash.go", "drill/queued.go", "env/nats.go"}

// TestHarnessSizeBudget keeps the harness within its line budget.
func TestHarnessSizeBudget(t *testing.T) {
	var all, apart int
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n := bytes.Count(b, []byte("\n"))
		all += n
		for _, f := range afterBudget {
			if filepath.ToSlash(path) == f {
				apart += n
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if apart == 0 {
		t.Fatalf("none of %v found: the list of files counted apart is out of date", afterBudget)
	}
	t.Logf("loadtest/: %d non-test lines, %d of them in %v, %d held to the budget of %d", all, apart, afterBudget, all-apart, lineBudget)
	if all-apart > lineBudget {
		t.Errorf("loadtest/ has %d non-test lines outside %v, over its budget of %d (docs/harness.md): consolidate before adding", all-apart, afterBudget, lineBudget)
	}
}
