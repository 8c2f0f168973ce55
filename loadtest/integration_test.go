package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/strategy"

	"github.com/stocklock/stocklock/internal/testskip"
	"github.com/stocklock/stocklock/loadtest/env/envtest"
	"github.com/stocklock/stocklock/loadtest/history"
	"github.com/stocklock/stocklock/loadtest/report"
)

// TestHarnessAgainstTwoReplicas runs the harness for real against two
// in-test replicas: unsafe and local must show their race (the replicas
// sleep 10ms between reading and writing the stock, and 16 requests are in
// flight at once), in the totals and in the history, and the safe
// strategies must show none: their histories are linearizable.
func TestHarnessAgainstTwoReplicas(t *testing.T) {
	testskip.Long(t, "starts MongoDB, Redis and two replicas")
	t.Parallel()
	replicas := envtest.Replicas(t, testAdminToken, 10*time.Millisecond)

	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := run(t.Context(), []string{
		"--replicas", strings.Join(replicas, ","),
		"--strategies", "unsafe,local,atomic,redis-lock,etcd-lock,optimistic,mongo-lease",
		"--rate", "0", "--workers", "16", "--max-workers", "16",
		"--requests", "160", "--duration", "2m",
		"--stock", "50", "--warmup", "0s", "--settle", "100ms",
		"--out", out, "--quiet",
	}, envOf(), &stdout, &stderr)
	t.Logf("harness took %s\nstdout:\n%s\nstderr:\n%s", time.Since(start).Round(time.Millisecond), stdout.String(), stderr.String())
	if code != exitOK {
		t.Fatalf("exit %d: a safe strategy failed or the harness broke", code)
	}

	rep := readReport(t, out)
	runs := byStrategy(&rep)
	for name, r := range runs {
		// The books must balance whatever the strategy: every request is
		// in exactly one class, and the ledger holds an order per sale
		// unless the strategy is one that loses them.
		if got := r.Orders + r.SoldOut + r.Unavailable + r.Other + r.Transport; got != r.Requests {
			t.Errorf("%s: classes add up to %d of %d requests", name, got, r.Requests)
		}
		if r.Requests != 160 {
			t.Errorf("%s: %d requests, want 160", name, r.Requests)
		}
		// Both replicas get requests; without a cross-replica lease both
		// sell. A lease strategy on a loaded machine may keep the lease
		// on one replica for all 50 units, which is no fault.
		if info, _ := strategy.Lookup(name); len(r.ByReplica) != 2 && (info.Lock == strategy.LockNone || info.Lock == strategy.LockLocal) {
			t.Errorf("%s: sales by replica %v: both replicas must have sold", name, r.ByReplica)
		}
	}

	us := runs["unsafe"]
	if us.LostUpdates == 0 && us.Oversold == 0 {
		t.Errorf("unsafe: no lost update and no oversell detected with a 10ms window and 16 concurrent requests: %+v", us)
	}
	if us.Verdict != "demonstrated" {
		t.Errorf("unsafe verdict %q", us.Verdict)
	}
	// Every acknowledged sale is in the ledger even for unsafe: its bug is
	// the stock count, not the order log.
	if us.LedgerMismatch != 0 {
		t.Errorf("unsafe ledger mismatch %d: %+v", us.LedgerMismatch, us.Ledger)
	}

	for _, name := range []string{"unsafe", "local"} {
		r := runs[name]
		if r.Linearizable != "no" || len(r.Violations) == 0 || len(r.Conflicts) == 0 {
			t.Errorf("%s: linearizable %q, pictures %v, conflicts %v: the checker must flag a strategy that races", name, r.Linearizable, r.Violations, r.Conflicts)
		}
		for _, v := range r.Violations {
			if _, err := os.Stat(filepath.Join(out, v)); err != nil {
				t.Errorf("%s: picture %s: %v", name, v, err)
			}
		}
	}
	for _, name := range []string{"atomic", "redis-lock", "etcd-lock", "optimistic", "mongo-lease"} {
		r := runs[name]
		if r.Oversold != 0 || r.LostUpdates != 0 || r.LedgerMismatch != 0 || r.Verdict != "pass" {
			t.Errorf("%s: anomalies %+v", name, r)
		}
		checkHistoryFile(t, out, r, "yes")
		// A unit can leave the stock without a 200 only for a request
		// whose answer never came (a client timeout on a loaded machine).
		if r.Sold+r.Unacknowledged+r.Remaining != r.Initial || r.Unacknowledged > r.Transport+r.Other {
			t.Errorf("%s: sold %d + unanswered %d + remaining %d != %d, or more unanswered units than unanswered requests (%d)",
				name, r.Sold, r.Unacknowledged, r.Remaining, r.Initial, r.Transport+r.Other)
		}
	}
	// 160 requests for 50 units at one unit each: atomic always sells out.
	if a := runs["atomic"]; a.Sold != 50 || a.Remaining != 0 || a.SoldOut != 110 {
		t.Errorf("atomic: %+v", a)
	}
	for _, name := range []string{"redis-lock", "etcd-lock"} {
		if rl := runs[name]; rl.LockWaitP99 == nil {
			t.Errorf("%s: no lock wait scraped from /metrics", name)
		}
	}
}

// TestHarnessInterrupted checks that cancelling the harness (Ctrl-C) stops
// an attack promptly and reports it as an error, not as a verdict.
func TestHarnessInterrupted(t *testing.T) {
	replicas := fakeReplicas(t)
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(500*time.Millisecond, cancel)
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := run(ctx, []string{
		"--replicas", strings.Join(replicas, ","), "--strategies", "atomic",
		"--rate", "50", "--duration", "30s", "--stock", "100000", "--warmup", "0s",
		"--out", t.TempDir(), "--quiet",
	}, envOf(), &stdout, &stderr)
	if code != exitError {
		t.Fatalf("exit %d, want %d", code, exitError)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %s to stop", d)
	}
	if !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("stderr: %s", stderr.String())
	}
	if errors.Is(ctx.Err(), context.Canceled) == false {
		t.Fatal("context not cancelled")
	}
}

// checkHistoryFile checks that run r's history file holds a set, every
// request (its decrements, counting retries) and reads, and that the
// checker's verdict on it is want.
func checkHistoryFile(t *testing.T, out string, r report.Run, want string) {
	t.Helper()
	if r.Linearizable != want {
		t.Errorf("%s: linearizable %q, want %q; %v", r.Strategy, r.Linearizable, want, r.Conflicts)
	}
	f, err := os.Open(filepath.Join(out, r.History))
	if err != nil {
		t.Fatalf("%s: history: %v", r.Strategy, err)
	}
	defer f.Close()
	ops, err := history.ReadJSONL(f)
	if err != nil {
		t.Fatalf("%s: %v", r.Strategy, err)
	}
	kinds := map[history.Kind]int{}
	for _, op := range ops {
		kinds[op.Kind]++
	}
	if kinds[history.Set] != len(r.SKUs) || kinds[history.Decrement] != r.Requests+r.Resent || kinds[history.Read] == 0 {
		t.Errorf("%s: history of %v for %d skus and %d requests (+%d resent)", r.Strategy, kinds, len(r.SKUs), r.Requests, r.Resent)
	}
}

// TestWorkloadsAgainstTwoReplicas runs the mixed and retry workloads
// against two in-test replicas. Mixed: a lock strategy and atomic on one
// sku must stay linearizable (the lock holder's write refuses a stock that
// changed since its read). Retries: answers cut by the proxy are sent again
// with the same Idempotency-Key, and no key may sell twice.
func TestWorkloadsAgainstTwoReplicas(t *testing.T) {
	testskip.Long(t, "starts MongoDB, Redis and two replicas")
	t.Parallel()
	replicas := envtest.Replicas(t, testAdminToken, 10*time.Millisecond)
	common := []string{"--replicas", strings.Join(replicas, ","), "--rate", "0", "--workers", "8", "--max-workers", "8",
		"--requests", "80", "--duration", "2m", "--stock", "40", "--warmup", "0s", "--settle", "100ms", "--quiet"}
	for _, w := range []struct {
		name string
		args []string
	}{
		{"mixed", []string{"--mixed", "--strategies", "redis-lock,atomic,optimistic"}},
		{"retries", []string{"--retries", "2", "--cut-rate", "0.2", "--attempt-timeout", "3s", "--strategies", "atomic,redis-lock"}},
	} {
		t.Run(w.name, func(t *testing.T) {
			out := t.TempDir()
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), append(append([]string{"--out", out}, common...), w.args...), envOf(), &stdout, &stderr)
			t.Logf("stdout:\n%s", stdout.String())
			if code != exitOK {
				t.Fatalf("exit %d; stderr:\n%s", code, lastLines(stderr.String(), 30))
			}
			for _, r := range readReport(t, out).Runs {
				if r.Verdict != "pass" || r.Oversold != 0 || r.LostUpdates != 0 || r.LedgerMismatch != 0 || r.DoubleSold != 0 || r.Unrecorded != 0 {
					t.Errorf("%s: %+v", r.Strategy, r)
				}
				checkHistoryFile(t, out, r, "yes")
				if w.name == "retries" && (r.Cuts == 0 || r.Resent == 0) {
					t.Errorf("%s: %d answers cut, %d re-sent: the retry path was not exercised", r.Strategy, r.Cuts, r.Resent)
				}
				if w.name == "mixed" && (len(r.Outcomes) != 3 || r.Sold != 40) {
					t.Errorf("mixed: sold %d, outcomes %v", r.Sold, r.Outcomes)
				}
			}
		})
	}
}
