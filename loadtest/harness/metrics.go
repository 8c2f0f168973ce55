package harness

import (
	"bytes"
	"maps"
	"math"
	"slices"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// families parses a Prometheus text exposition, as much of it as it can.
func families(text []byte) map[string]*dto.MetricFamily {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, _ := p.TextToMetricFamilies(bytes.NewReader(text))
	return fams
}

func label(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

// histograms are the series of the histogram called name in a Prometheus
// text exposition that carry a histogram; none when there is no such
// histogram.
func histograms(text []byte, name string) []*dto.Metric {
	f := families(text)[name]
	if f.GetType() != dto.MetricType_HISTOGRAM {
		return nil
	}
	return slices.DeleteFunc(f.GetMetric(), func(m *dto.Metric) bool { return m.GetHistogram() == nil })
}

// histSnapshot is one scrape of a histogram of one replica: by the value
// of a label, the cumulative bucket counts by upper bound (seconds).
type histSnapshot map[string]map[float64]float64

// parseLockWait reads the replicas' histograms of lock waits, by strategy,
// from a Prometheus text exposition; nil when there are none.
var parseLockWait = histogramsBy("stock_lock_wait_seconds", "strategy")

// parseShedTimes reads the replicas' histogram of the time each shed sale
// request took in their handlers, under the key "".
var parseShedTimes = histogramsBy("stock_sales_shed_seconds", "")

// histogramsBy is the parser of the histogram called name, by the value of
// its label by ("" for all under one key): from a Prometheus text
// exposition, nil when there is none.
func histogramsBy(name, by string) func(text []byte) histSnapshot {
	return func(text []byte) histSnapshot {
		ms := histograms(text, name)
		if ms == nil {
			return nil
		}
		s := histSnapshot{}
		for _, m := range ms {
			key, h := label(m, by), m.GetHistogram()
			if s[key] == nil {
				s[key] = map[float64]float64{}
			}
			bs := s[key]
			// Several series may share a key (other labels such as the
			// outcome): add them up.
			hasInf := false
			for _, b := range h.GetBucket() {
				bs[b.GetUpperBound()] += float64(b.GetCumulativeCount())
				hasInf = hasInf || math.IsInf(b.GetUpperBound(), 1)
			}
			if !hasInf {
				bs[math.Inf(1)] += float64(h.GetSampleCount())
			}
		}
		return s
	}
}

// p99Ms estimates the 99th percentile, in ms, of the observations under
// key that the replicas made between the scrapes; ok is false without any.
func p99Ms(before, after []histSnapshot, key string) (ms float64, ok bool) {
	q, ok := histogramQuantile(0.99, added(before, after, key, func(sum, a, b float64) float64 { return sum + (a - b) }))
	return q * 1000, ok
}

// added sums, over the replicas, what each one's after scrape of strategy
// adds to its before scrape, key by key: add(sum, after, before).
func added[S ~map[string]map[K]V, K comparable, V any](before, after []S, strategy string, add func(sum, a, b V) V) map[K]V {
	out := map[K]V{}
	for i, a := range after {
		var b map[K]V
		if i < len(before) {
			b = before[i][strategy]
		}
		for k, v := range a[strategy] {
			out[k] = add(out[k], v, b[k])
		}
	}
	return out
}

// histogramQuantile is Prometheus's histogram_quantile over cumulative
// bucket counts keyed by upper bound (which must include +Inf): linear
// interpolation inside the bucket that holds the rank; the highest finite
// bound when the rank falls in the +Inf bucket.
func histogramQuantile(q float64, cum map[float64]float64) (float64, bool) {
	bounds := slices.Sorted(maps.Keys(cum))
	if len(bounds) == 0 || !math.IsInf(bounds[len(bounds)-1], 1) || cum[math.Inf(1)] <= 0 {
		return 0, false
	}
	rank := q * cum[math.Inf(1)]
	prevBound, prevCount := 0.0, 0.0
	for i, le := range bounds {
		switch n := cum[le]; {
		case n < rank:
			prevBound, prevCount = le, n
		case math.IsInf(le, 1):
			return prevBound, i > 0 // the highest finite bound
		case n == prevCount, i == 0 && le <= 0:
			return le, true
		default:
			return prevBound + (le-prevBound)*(rank-prevCount)/(n-prevCount), true
		}
	}
	return bounds[len(bounds)-1], true
}

// stepTotals is one scrape of one replica's sale step histograms: the sum
// of the times, in seconds, and their count, by strategy and step.
type stepTotals map[string]map[string]stepTotal

type stepTotal struct{ sum, count float64 }

// parseSaleSteps reads the replicas' histograms of the time of each step of
// a sale under a lock (see inventory.StepObserver) from a Prometheus text
// exposition; nil when there are none.
func parseSaleSteps(text []byte) stepTotals {
	ms := histograms(text, "stock_sale_step_seconds")
	if ms == nil {
		return nil
	}
	out := stepTotals{}
	for _, m := range ms {
		strategy, step, h := label(m, "strategy"), label(m, "step"), m.GetHistogram()
		if strategy == "" || step == "" {
			continue
		}
		if out[strategy] == nil {
			out[strategy] = map[string]stepTotal{}
		}
		t := out[strategy][step]
		out[strategy][step] = stepTotal{t.sum + h.GetSampleSum(), t.count + float64(h.GetSampleCount())}
	}
	return out
}

// stepMeans returns the mean time of each step of strategy's sales, in ms,
// over what the replicas observed between the scrapes; nil without any.
func stepMeans(before, after []stepTotals, strategy string) map[string]float64 {
	totals := added(before, after, strategy, func(sum, a, b stepTotal) stepTotal {
		return stepTotal{sum.sum + (a.sum - b.sum), sum.count + (a.count - b.count)}
	})
	out := map[string]float64{}
	for step, t := range totals {
		if t.count > 0 {
			out[step] = 1000 * t.sum / t.count
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
