package harness

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stocklock/stocklock/loadtest/attack"
	"github.com/stocklock/stocklock/loadtest/drill"
	"github.com/stocklock/stocklock/loadtest/history"
	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/loadtest/verdict"
	"github.com/stocklock/stocklock/pkg/strategy"
)

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
