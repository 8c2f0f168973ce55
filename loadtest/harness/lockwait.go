package harness

import (
	"bytes"
	"math"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// histSnapshot is one scrape of the lock wait histograms of one replica,
// per strategy label: cumulative bucket counts by upper bound.
type histSnapshot struct {
	// unit converts the histogram's values to milliseconds.
	unit    float64
	buckets map[string]map[float64]float64 // strategy -> upper bound -> cumulative count
}

// parseLockWait finds the lock wait histogram in a Prometheus text
// exposition: a histogram family whose name contains "lock_wait" and which
// has a "strategy" label (stock_lock_wait_seconds, in the stock service).
// It returns nil when there is none.
func parseLockWait(text []byte) *histSnapshot {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil && len(fams) == 0 {
		return nil
	}
	var names []string
	for name, f := range fams {
		if f.GetType() == dto.MetricType_HISTOGRAM && strings.Contains(name, "lock_wait") {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	// Prefer a name in seconds, the Prometheus convention, then the
	// shortest (the plain one rather than a derived one).
	sort.Slice(names, func(i, j int) bool {
		si, sj := strings.HasSuffix(names[i], "_seconds"), strings.HasSuffix(names[j], "_seconds")
		if si != sj {
			return si
		}
		if len(names[i]) != len(names[j]) {
			return len(names[i]) < len(names[j])
		}
		return names[i] < names[j]
	})
	name := names[0]
	s := &histSnapshot{unit: 1000, buckets: map[string]map[float64]float64{}}
	switch {
	case strings.HasSuffix(name, "_milliseconds"), strings.HasSuffix(name, "_ms"):
		s.unit = 1
	case strings.HasSuffix(name, "_microseconds"), strings.HasSuffix(name, "_us"):
		s.unit = 0.001
	}
	for _, m := range fams[name].GetMetric() {
		strategy := ""
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "strategy" {
				strategy = lp.GetValue()
			}
		}
		h := m.GetHistogram()
		if h == nil {
			continue
		}
		bs := s.buckets[strategy]
		if bs == nil {
			bs = map[float64]float64{}
			s.buckets[strategy] = bs
		}
		// Several series may share a strategy (other labels such as the
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

// lockWaitP99 estimates the 99th percentile lock wait of strategy, in ms,
// over the observations made between the before and after scrapes, summed
// over the replicas. ok is false when no replica observed any wait.
func lockWaitP99(before, after []*histSnapshot, strategy string) (ms float64, ok bool) {
	delta := map[float64]float64{}
	unit := 1000.0
	for i, a := range after {
		if a == nil {
			continue
		}
		unit = a.unit
		var b map[float64]float64
		if i < len(before) && before[i] != nil {
			b = before[i].buckets[strategy]
		}
		for le, n := range a.buckets[strategy] {
			delta[le] += n - b[le]
		}
	}
	q, ok := histogramQuantile(0.99, delta)
	return q * unit, ok
}

// histogramQuantile is Prometheus's histogram_quantile over cumulative
// bucket counts keyed by upper bound (which must include +Inf): linear
// interpolation inside the bucket that holds the rank; the highest finite
// bound when the rank falls in the +Inf bucket.
func histogramQuantile(q float64, cum map[float64]float64) (float64, bool) {
	if len(cum) == 0 {
		return 0, false
	}
	bounds := make([]float64, 0, len(cum))
	for le := range cum {
		bounds = append(bounds, le)
	}
	sort.Float64s(bounds)
	total := cum[bounds[len(bounds)-1]]
	if !math.IsInf(bounds[len(bounds)-1], 1) || total <= 0 {
		return 0, false
	}
	rank := q * total
	prevBound, prevCount := 0.0, 0.0
	for i, le := range bounds {
		n := cum[le]
		if n >= rank {
			if math.IsInf(le, 1) {
				if i == 0 {
					return 0, false
				}
				return bounds[i-1], true
			}
			if n == prevCount {
				return le, true
			}
			lower := prevBound
			if i == 0 && le <= 0 {
				lower = le
			}
			return lower + (le-lower)*(rank-prevCount)/(n-prevCount), true
		}
		prevBound, prevCount = le, n
	}
	return bounds[len(bounds)-1], true
}
