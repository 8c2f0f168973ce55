package harness

import (
	"context"
	"time"

	"github.com/stocklock/stocklock/loadtest/env"
	"github.com/stocklock/stocklock/loadtest/report"
)

// Compare is the comparison: every strategy in turn under the same load,
// or all of them at once on shared skus.
type Compare struct {
	Mixed          bool          // every strategy at once on shared skus
	Retries        int           // re-sends of a decrement whose answer did not arrive, same Idempotency-Key
	AttemptTimeout time.Duration // each attempt's own timeout when Retries > 0
	CutRate        float64       // with Retries: the share of answers the proxy in front of the first replica cuts
}

// DefaultCompare is the comparison with the command line's defaults.
func DefaultCompare() *Compare {
	return &Compare{AttemptTimeout: 250 * time.Millisecond, CutRate: 0.1}
}

func (Compare) Defaults(*Config)         {}
func (Compare) Env(Config, *env.Options) {}

func (s Compare) Check(c Config, bad Problem) {
	between(bad, "Retries", s.Retries, 0, 10)
	if s.AttemptTimeout < time.Millisecond || s.AttemptTimeout > c.Timeout {
		bad("AttemptTimeout %s: must be between 1ms and Timeout (%s)", s.AttemptTimeout, c.Timeout)
	}
	if s.CutRate < 0 || s.CutRate >= 1 {
		bad("CutRate %g: must be at least 0 and below 1", s.CutRate)
	}
	if s.Mixed {
		if len(c.Strategies) < 2 {
			bad("Mixed needs at least two Strategies to mix")
		}
		checkMixedThresholds(c, bad)
	}
}

// Run runs every strategy in turn, or the one mixed run.
func (s Compare) Run(ctx context.Context, h *Harness, rep *report.Report) error {
	if err := h.warmup(ctx); err != nil {
		return err
	}
	strategies := h.cfg.Strategies
	if s.Mixed {
		strategies = []string{mixedRun}
	}
	o := runOpts{}
	if s.Retries > 0 {
		o.retry = &s
	}
	for i, st := range strategies {
		h.logf("[%d/%d] %s: stock %d × %d sku, %s", i+1, len(strategies), st, h.cfg.Stock, h.cfg.SKUs, h.loadText())
		run, err := h.runStrategy(ctx, st, o)
		if err != nil {
			return err
		}
		h.logf("  → %s: sold %d of %d, remaining %d, oversold %d, lost updates %d, ledger mismatch %d, linearizable %s (%s)",
			st, run.Sold, run.Initial, run.Remaining, run.Oversold, run.LostUpdates, run.LedgerMismatch, run.Linearizable, run.Verdict)
		rep.Runs = append(rep.Runs, run)
	}
	return nil
}
