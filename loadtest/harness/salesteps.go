package harness

import (
	dto "github.com/prometheus/client_model/go"

	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// saleStepMetric is the replicas' histogram of the time of each step of a
// sale under a lock (see inventory.StepObserver).
const saleStepMetric = "stock_sale_step_seconds"

// stepTotals is one scrape of one replica's sale step histograms: the sum
// of the times, in seconds, and their count, by strategy and step.
type stepTotals map[string]map[string]stepTotal

type stepTotal struct{ sum, count float64 }

// parseSaleSteps reads the sale step histograms of a Prometheus text
// exposition; nil when there are none.
func parseSaleSteps(text []byte) stepTotals {
	f := families(text)[saleStepMetric]
	if f == nil || f.GetType() != dto.MetricType_HISTOGRAM {
		return nil
	}
	out := stepTotals{}
	for _, m := range f.GetMetric() {
		strategy, step := label(m, "strategy"), label(m, "step")
		h := m.GetHistogram()
		if h == nil || strategy == "" || step == "" {
			continue
		}
		if out[strategy] == nil {
			out[strategy] = map[string]stepTotal{}
		}
		t := out[strategy][step]
		t.sum += h.GetSampleSum()
		t.count += float64(h.GetSampleCount())
		out[strategy][step] = t
	}
	return out
}

// stepMeans returns the mean time of each step of strategy's sales, in ms,
// over the observations made between the before and after scrapes, summed
// over the replicas (sum of the times over their count); nil when no
// replica observed any step.
func stepMeans(before, after []stepTotals, strategy string) map[string]float64 {
	sums, counts := map[string]float64{}, map[string]float64{}
	for i, a := range after {
		var b map[string]stepTotal
		if i < len(before) {
			b = before[i][strategy]
		}
		for step, t := range a[strategy] {
			sums[step] += t.sum - b[step].sum
			counts[step] += t.count - b[step].count
		}
	}
	out := map[string]float64{}
	for step, n := range counts {
		if n > 0 {
			out[step] = 1000 * sums[step] / n
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// saleBound fills run's step times and, on one hot sku, its bound from the
// scrapes around it. Over several skus the locks do not serialise every
// sale, so one over the held steps bounds nothing.
func saleBound(run *report.Run, before, after []stepTotals) {
	means := stepMeans(before, after, run.Strategy)
	if means == nil {
		return
	}
	run.StepMs = means
	if len(run.SKUs) <= 1 {
		run.BoundPerSec = report.Bound(means, strategy.HeldSteps)
	}
}
