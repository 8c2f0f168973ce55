package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/stocklock/stocklock/loadtest/history"
)

// mixedRun names the one run of --mixed, in which every chosen strategy
// decrements the same skus at once.
const mixedRun = "mixed"

// writers are the strategies whose requests a run sends: every chosen one
// for the mixed run, else the run's own.
func (h *harness) writers(strategy string) []string {
	if strategy == mixedRun {
		return h.cfg.Strategies
	}
	return []string{strategy}
}

// historyName is the file stem of a run's history and its pictures.
func historyName(strategy string, drill int) string {
	if drill > 0 {
		return fmt.Sprintf("history-%s-f%d", strategy, drill)
	}
	return "history-" + strategy
}

// attackTargets are the base URLs the attackers send to, one per replica:
// with retries on, the first goes through a proxy that cuts a share of the
// answers, which the caller must Close.
func (h *harness) attackTargets() ([]string, *cutProxy, error) {
	targets := append([]string(nil), h.replicas...)
	if h.cfg.Retries == 0 {
		return targets, nil, nil
	}
	u, err := url.Parse(targets[0])
	if err != nil {
		return nil, nil, fmt.Errorf("replica URL %q: %w", targets[0], err)
	}
	if u.Scheme != "http" {
		return nil, nil, fmt.Errorf("--retries: the cutting proxy forwards plain TCP, but %s is %s", targets[0], u.Scheme)
	}
	p, err := startCutProxy(u.Host, h.cfg.CutRate, time.Now().UnixNano())
	if err != nil {
		return nil, nil, fmt.Errorf("start the cutting proxy: %w", err)
	}
	targets[0] = "http://" + p.Addr()
	return targets, p, nil
}

// recording returns the transport wrapper that records the attack on
// target into rec, retrying as configured.
func (h *harness) recording(rec *history.Recorder, target string) func(http.RoundTripper) http.RoundTripper {
	return func(base http.RoundTripper) http.RoundTripper {
		t := &recordingTransport{base: base, rec: rec, target: target}
		if h.cfg.Retries > 0 {
			t.retries, t.attempt = h.cfg.Retries, h.cfg.AttemptTimeout
		}
		return t
	}
}

// resent counts the attempts beyond each request's first.
func resent(ops []history.Op) int {
	n := 0
	for _, op := range ops {
		if op.Attempt > 1 {
			n++
		}
	}
	return n
}

// drainWait bounds the wait for pending orders: a surviving replica's
// periodic recovery writes them within a few seconds.
const drainWait = 30 * time.Second

// waitDrained polls every sku until none has a pending order (a unit taken
// whose order is not yet in the ledger), so that stock and ledger can be
// compared unit for unit. It returns false if some were still pending
// after drainWait.
func (h *harness) waitDrained(ctx context.Context, base string, skus []string) (bool, error) {
	deadline := time.Now().Add(drainWait)
	lastNote := time.Now()
	for {
		pending := 0
		for _, sku := range skus {
			it, err := h.api.getItem(ctx, base, sku)
			if err != nil {
				return false, fmt.Errorf("read the pending orders: %w", err)
			}
			pending += len(it.Pending)
		}
		if pending == 0 {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		if time.Since(lastNote) >= 2*time.Second {
			lastNote = time.Now()
			h.logf("  waiting for %d pending orders to reach the ledger...", pending)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return false, err
		}
	}
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
				k = string(op.Outcome) + " " + transportKind(op.Error)
			}
		}
		out[op.Strategy][k]++
	}
	return out
}
