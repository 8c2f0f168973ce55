package harness

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/stocklock/stocklock/loadtest/drill"
	"github.com/stocklock/stocklock/loadtest/report"
)

// runFaults runs every drill of the plan, --repeat times.
func (h *Harness) runFaults(ctx context.Context) ([]report.Run, error) {
	drills := drill.Plan(h.cfg.Faults, h.cfg.Strategies)
	if len(drills) == 0 {
		return nil, fmt.Errorf("faults %s with --strategies %s: no drill applies", strings.Join(h.cfg.Faults, ","), strings.Join(h.cfg.Strategies, ","))
	}
	if err := h.warmup(ctx); err != nil {
		return nil, err
	}
	var runs []report.Run
	total := len(drills) * h.cfg.Repeat
	n := 0
	began := time.Now()
	for rep := 1; rep <= h.cfg.Repeat; rep++ {
		for _, d := range drills {
			n++
			if err := h.env.Configure(ctx, d.Flags.PerReplica(h.env.Len())); err != nil {
				return runs, fmt.Errorf("%s, %s: reconfigure the replicas: %w", d.Label, d.Strategy, err)
			}
			eta := ""
			if n > 1 {
				per := time.Since(began) / time.Duration(n-1)
				eta = fmt.Sprintf(", about %s left", (per * time.Duration(total-n+1)).Round(time.Second))
			}
			h.logf("[%d/%d] repeat %d/%d, %s, %s: %s%s", n, total, rep, h.cfg.Repeat, d.Label, d.Strategy, h.loadText(), eta)
			run, err := h.runStrategy(ctx, d.Strategy, &faultSpec{drill: d, repeat: rep})
			if err != nil {
				return runs, err
			}
			rec := "-"
			if run.RecoverySeconds != nil {
				rec = fmt.Sprintf("%.2fs", *run.RecoverySeconds)
			}
			h.logf("  → %s: %s; sold %d, oversold %d, lost updates %d, ledger mismatch %d, fenced %d, lease lost %d, sales resumed after %s (%s)",
				d.Strategy, run.FaultNote, run.Sold, run.Oversold, run.LostUpdates, run.LedgerMismatch,
				run.Codes["503 fenced"], run.Codes["503 lease_lost"], rec, run.Verdict)
			runs = append(runs, run)
		}
	}
	return runs, nil
}

// faultSpec is the fault side of one runStrategy call.
type faultSpec struct {
	drill  drill.Drill
	repeat int
}
