package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/stocklock/stocklock/loadtest/env"
	"github.com/stocklock/stocklock/loadtest/history"
	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/loadtest/verdict"
)

// The capacity sweep's defaults.
const (
	capacityFirstRate = 50
	// capacityKeep is how far below the offered rate the sales may fall
	// before the step counts as saturated.
	capacityKeep = 0.9
)

// capacityLimit says what a step must stay within, for the report.
func (c Config) capacityLimit() string {
	return fmt.Sprintf("p99 at most %s, errors and 503s at most %.0f%% of the requests, sales at least %.0f%% of the offered rate",
		c.CapacityP99, 100*c.CapacityErrors, 100*capacityKeep)
}

// runCapacity finds each strategy's capacity at each replica count: it
// offers 50 req/s, then twice as much at every step, each step on fresh
// skus with more stock than it can sell, until a step passes the limits
// (p99, errors and 503s, sales falling behind the offered rate) or the
// rate reaches CapacityMaxRate.
func (h *Harness) runCapacity(ctx context.Context) ([]report.Run, error) {
	counts := h.cfg.CapacityReplicas
	if len(counts) == 0 {
		counts = []int{len(h.replicas)}
	}
	var runs []report.Run
	for _, n := range counts {
		if n != len(h.replicas) {
			if h.env == nil {
				return runs, fmt.Errorf("capacity with %d replicas: the harness can change the replica count only of replicas it starts", n)
			}
			if err := h.env.Scale(ctx, n); err != nil {
				return runs, err
			}
			h.useEnv()
		}
		if err := h.warmup(ctx); err != nil {
			return runs, err
		}
		for _, s := range h.cfg.Strategies {
			for step, rate := 1, capacityFirstRate; rate <= h.cfg.CapacityMaxRate; step, rate = step+1, rate*2 {
				run, err := h.capacityStep(ctx, s, step, rate)
				if err != nil {
					return runs, err
				}
				runs = append(runs, run)
				if run.Saturated != "" {
					break
				}
			}
		}
	}
	return runs, nil
}

// capacityStep runs one strategy at one offered rate.
func (h *Harness) capacityStep(ctx context.Context, strategy string, step, rate int) (report.Run, error) {
	saved := h.cfg
	defer func() { h.cfg = saved }()
	secs := h.cfg.Duration.Seconds()
	h.cfg.Rate = max(rate, len(h.replicas))
	// Every sku can take the whole step's requests: the sweep measures
	// selling, not selling out.
	h.cfg.Stock = min(MaxStock, int(float64(rate)*secs*2)+10)
	h.logf("[capacity] %s on %d replicas, step %d: %d req/s for %s", strategy, len(h.replicas), step, rate, h.cfg.Duration)
	steps := h.scrapeSaleSteps(ctx)
	run, err := h.runStrategy(ctx, strategy, nil)
	if err != nil {
		return run, err
	}
	saleBound(&run, steps, h.scrapeSaleSteps(ctx))
	run.CapacityStep, run.ReplicaCount = step, len(h.replicas)
	run.Saturated = limits(&run, h.cfg)
	h.logf("  → %d req/s offered: %.1f sales/s, p99 %s, errors and 503s %d%s%s", rate, run.SalesPerSec, report.Ms(run.Latency.P99), run.Errors()+run.Unavailable, boundNote(run), suffix(run.Saturated))
	return run, nil
}

// boundNote is the log's mention of a step's bound, "" without one.
func boundNote(r report.Run) string {
	if r.BoundPerSec == nil {
		return ""
	}
	return fmt.Sprintf(", bound %s sales/s (%s of it; %s)", r.BoundText(), r.BoundShare(), r.StepsText())
}

func suffix(s string) string {
	if s == "" {
		return ""
	}
	return "; past the limits: " + s
}

// limits are a step's limit checks, appended to its checks; it returns
// how the step passed the first it failed ("" if none).
func limits(r *report.Run, c Config) string {
	bad := r.Errors() + r.Unavailable
	past := ""
	for _, l := range []struct {
		check verdict.Check
		why   string
	}{
		{verdict.Check{Name: "answered", Observed: fmt.Sprint(r.Requests), Bound: "> 0", Pass: r.Requests > 0}, "no request was answered"},
		{verdict.Check{Name: "p99", Observed: report.Ms(r.Latency.P99), Bound: "<= " + c.CapacityP99.String(), Pass: r.Latency.P99 <= float64(c.CapacityP99)/float64(time.Millisecond)},
			fmt.Sprintf("p99 %s over %s", report.Ms(r.Latency.P99), c.CapacityP99)},
		{verdict.Check{Name: "errors and 503s", Observed: fmt.Sprintf("%d of %d", bad, r.Requests), Bound: fmt.Sprintf("<= %g%%", 100*c.CapacityErrors), Pass: float64(bad) <= c.CapacityErrors*float64(r.Requests)},
			fmt.Sprintf("%d of %d requests were errors or 503s", bad, r.Requests)},
		{verdict.Check{Name: "sales_per_s", Observed: fmt.Sprintf("%.1f", r.SalesPerSec), Bound: fmt.Sprintf(">= %.0f%% of %d", 100*capacityKeep, r.TargetRate), Pass: r.SalesPerSec >= capacityKeep*float64(r.TargetRate)},
			fmt.Sprintf("%.1f sales/s fell behind the offered %d", r.SalesPerSec, r.TargetRate)},
	} {
		l.check.Kind = verdict.Limit
		r.Checks = append(r.Checks, l.check)
		if !l.check.Pass && past == "" {
			past = l.why
		}
	}
	return past
}

// useEnv points the harness at the Env's replicas, after it scaled.
func (h *Harness) useEnv() {
	h.replicas = h.env.Bases()
	h.ids = map[string]string{}
	for i, b := range h.replicas {
		h.ids[b] = env.ReplicaID(i)
	}
}

// skippedHistory is the check of a run whose history is not checked: a
// capacity step's thousands of operations on one sku would cost the
// checker more than the step.
var skippedHistory = linearizability{verdict: history.Verdict("not checked")}
