package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/stocklock/stocklock/loadtest/env"
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

// Capacity is the capacity sweep: each strategy at a doubling offered
// rate until a step passes the limits, at each replica count.
type Capacity struct {
	P99      time.Duration // a step's p99 limit
	Errors   float64       // a step's limit on errors and 503s, a share of its requests
	MaxRate  int           // the highest rate offered
	Replicas []int         // replica counts to sweep; none: LocalReplicas (or Config.Replicas)
	PastKnee bool          // go on past each strategy's knee with the open model (pastknee.go)
}

// DefaultCapacity is the sweep with the command line's defaults.
func DefaultCapacity() *Capacity {
	return &Capacity{P99: 500 * time.Millisecond, Errors: 0.01, MaxRate: 3200}
}

// Defaults: short steps, and neither the read-modify-write delay nor
// reads, which would cap what the sweep measures.
func (Capacity) Defaults(c *Config) { c.Duration, c.RMWDelay, c.ReadEvery = 3*time.Second, 0, 0 }

func (Capacity) Env(Config, *env.Options) {}

func (s Capacity) Check(c Config, bad Problem) {
	between(bad, "Capacity.P99", s.P99, time.Millisecond, time.Minute)
	if s.Errors < 0 || s.Errors >= 1 {
		bad("Capacity.Errors %g: must be at least 0 and below 1", s.Errors)
	}
	between(bad, "Capacity.MaxRate", s.MaxRate, 50, maxRate)
	if c.Requests > 0 {
		bad("Requests %d: capacity steps are bounded by Duration alone", c.Requests)
	}
	for _, n := range s.Replicas {
		between(bad, "Capacity.Replicas", n, 1, maxLocalReplicas)
	}
	if len(s.Replicas) > 0 && len(c.Replicas) > 0 {
		bad("Capacity.Replicas needs the replicas the harness starts (it scales them): drop Replicas")
	}
}

// Run offers each strategy at each replica count 50 req/s, then twice as
// much at every step, each on fresh skus, until a step passes the limits
// (p99, errors and 503s, sales behind the offered rate) or MaxRate.
func (s Capacity) Run(ctx context.Context, h *Harness, rep *report.Report) error {
	rep.Settings.CapacityLimit = fmt.Sprintf("p99 at most %s, errors and 503s at most %.0f%% of the requests, sales at least %.0f%% of the offered rate",
		s.P99, 100*s.Errors, 100*capacityKeep)
	rep.Sections = append(rep.Sections, report.CapacitySection)
	if s.PastKnee {
		rep.Sections = append(rep.Sections, report.PastKneeSection)
	}
	counts := s.Replicas
	if len(counts) == 0 {
		counts = []int{len(h.replicas)}
	}
	for _, n := range counts {
		if n != len(h.replicas) {
			if h.env == nil {
				return fmt.Errorf("capacity with %d replicas: the harness can change the replica count only of replicas it starts", n)
			}
			if err := h.env.Scale(ctx, n); err != nil {
				return err
			}
			h.use(h.env.Bases(), env.ReplicaID)
		}
		if err := h.warmup(ctx); err != nil {
			return err
		}
		for _, st := range h.cfg.Strategies {
			for step, rate := 1, capacityFirstRate; rate <= s.MaxRate; step, rate = step+1, rate*2 {
				run, err := h.capacityStep(ctx, s, st, step, rate)
				if err != nil {
					return err
				}
				rep.Runs = append(rep.Runs, run)
				if run.Saturated != "" {
					break
				}
			}
			if s.PastKnee {
				if err := s.pastKnee(ctx, h, st, rep); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (h *Harness) capacityStep(ctx context.Context, s Capacity, strategy string, step, rate int) (report.Run, error) {
	saved := h.cfg
	defer func() { h.cfg = saved }()
	h.cfg.Rate = max(rate, len(h.replicas))
	// Every sku can take the whole step's requests: the sweep measures
	// selling, not selling out.
	h.cfg.Stock = min(MaxStock, int(float64(rate)*h.cfg.Duration.Seconds()*2)+10)
	h.logf("[capacity] %s on %d replicas, step %d: %d req/s for %s", strategy, len(h.replicas), step, rate, h.cfg.Duration)
	steps := scrape(ctx, h, parseSaleSteps)
	run, err := h.runStrategy(ctx, strategy, runOpts{step: true})
	if err != nil {
		return run, err
	}
	saleBound(&run, steps, scrape(ctx, h, parseSaleSteps))
	run.CapacityStep, run.ReplicaCount = step, len(h.replicas)
	run.Saturated = limits(&run, s)
	note := "" // the step's bound and the limit it passed, if any
	if run.BoundPerSec != nil {
		note = fmt.Sprintf(", bound %s sales/s (%s of it; %s)", run.BoundText(), run.BoundShare(), run.StepsText())
	}
	if run.Saturated != "" {
		note += "; past the limits: " + run.Saturated
	}
	h.logf("  → %d req/s offered: %.1f sales/s, p99 %s, errors and 503s %d%s", rate, run.SalesPerSec, report.Ms(run.Latency.P99), run.Errors()+run.Unavailable, note)
	return run, nil
}

// limits are a step's limit checks, appended to its checks; it returns
// how the step passed the first it failed ("" if none).
func limits(r *report.Run, c Capacity) string {
	bad := r.Errors() + r.Unavailable
	past := ""
	for _, l := range []struct {
		check verdict.Check
		why   string
	}{
		{verdict.Check{Name: "answered", Observed: fmt.Sprint(r.Requests), Bound: "> 0", Pass: r.Requests > 0}, "no request was answered"},
		{verdict.Check{Name: "p99", Observed: report.Ms(r.Latency.P99), Bound: "<= " + c.P99.String(), Pass: r.Latency.P99 <= float64(c.P99)/float64(time.Millisecond)},
			fmt.Sprintf("p99 %s over %s", report.Ms(r.Latency.P99), c.P99)},
		{verdict.Check{Name: "errors and 503s", Observed: fmt.Sprintf("%d of %d", bad, r.Requests), Bound: fmt.Sprintf("<= %g%%", 100*c.Errors), Pass: float64(bad) <= c.Errors*float64(r.Requests)},
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

// notChecked is the linearizability of a run whose history is not checked:
// a capacity step's thousands of operations on one sku would cost the
// checker more than the step.
const notChecked = "not checked"
