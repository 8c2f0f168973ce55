package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/stocklock/stocklock/loadtest/drill"
	"github.com/stocklock/stocklock/loadtest/report"
)

// pastKneeTop is the highest rate a sweep offers past the knee.
const pastKneeTop = 5000

// pastKneeRates are the rates offered past a knee: twice, four and eight
// times it, at most pastKneeTop.
func pastKneeRates(knee int) []int {
	var out []int
	for m := 2; m <= 8; m *= 2 {
		out = append(out, min(knee*m, pastKneeTop))
		if knee*m >= pastKneeTop {
			break
		}
	}
	return out
}

// knee is the highest rate of strategy's sweep on n replicas whose step
// stayed within the limits, the sweep's first rate if none did.
func knee(runs []report.Run, strategy string, n int) int {
	k := capacityFirstRate
	for _, r := range runs {
		if r.CapacityStep > 0 && r.Strategy == strategy && r.ReplicaCount == n && r.Saturated == "" {
			k = max(k, r.TargetRate)
		}
	}
	return k
}

// pastKnee offers strategy the rates past its knee with the flash sale's
// open model: buyers at one constant rate for Duration, each its own
// request with its own deadline (the sweep's p99 limit), on stock that
// never runs out, without an Idempotency-Key, as the sweep's own requests
// (Flash.Keyless). Each step is a flash run with the rate it was offered.
func (s Capacity) pastKnee(ctx context.Context, h *Harness, strategy string, rep *report.Report) error {
	saved := h.cfg
	defer func() { h.cfg = saved }()
	k := knee(rep.Runs, strategy, len(h.replicas))
	for _, rate := range pastKneeRates(k) {
		f := Flash{Buyers: max(1, int(float64(rate)*h.cfg.Duration.Seconds())), Over: h.cfg.Duration, Shape: ShapeConstant, Patience: s.P99, Conns: DefaultFlashConns, Keyless: true}
		h.cfg.Stock = min(MaxStock, f.Buyers*h.cfg.Qty+10)
		h.logf("[capacity, past the knee] %s on %d replicas: %d req/s (%.3g × the knee, %d), open model, patience %s, for %s",
			strategy, len(h.replicas), rate, float64(rate)/float64(k), k, f.Patience, h.cfg.Duration)
		api, done := herdClient(f)
		r := h.newFlashRun(f, api, strategy, fmt.Sprintf("pk%d", rate))
		out, err := r.sale(ctx, Arrivals(f.Shape, f.Buyers, f.Over))
		done()
		if err != nil {
			return fmt.Errorf("%s past the knee at %d req/s: %w", strategy, rate, err)
		}
		out.Offered, out.Replicas = rate, len(h.replicas)
		h.logf("  → %d req/s offered: goodput %.1f/s, %.0f%% answered within %s, sale p99 %s", rate, out.Goodput, 100*out.AnsweredShare, f.Patience,
			report.Ms(out.Kind(report.KindSale).Latency.P99))
		rep.Flash = append(rep.Flash, out)
		if err := drill.Sleep(ctx, time.Second); err != nil { // the herd's connections close
			return err
		}
	}
	return nil
}
