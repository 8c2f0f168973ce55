package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/stocklock/stocklock/loadtest/attack"
	"github.com/stocklock/stocklock/loadtest/drill"
	"github.com/stocklock/stocklock/loadtest/history"
)

// mixedRun names the one run of --mixed, in which every chosen strategy
// decrements the same skus at once.
const mixedRun = "mixed"

// writers are the strategies whose requests a run sends: every chosen one
// for the mixed run, else the run's own.
func (h *Harness) writers(strategy string) []string {
	if strategy == mixedRun {
		return h.cfg.Strategies
	}
	return []string{strategy}
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
func (h *Harness) waitDrained(ctx context.Context, base string, skus []string) (bool, error) {
	deadline := time.Now().Add(drainWait)
	lastNote := time.Now()
	for {
		pending := 0
		for _, sku := range skus {
			it, err := h.api.At(base).GetItem(ctx, sku)
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
		if err := drill.Sleep(ctx, 100*time.Millisecond); err != nil {
			return false, err
		}
	}
}

// poll calls done every `every` until it returns true, and says so, or
// until patience passes or ctx ends.
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
