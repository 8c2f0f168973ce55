package server

import (
	"time"

	"github.com/stocklock/stocklock/pkg/strategy"

	"github.com/prometheus/client_golang/prometheus"
)

// saleSteps is stock_sale_step_seconds: the time of each step of a sale
// under a lock (see inventory.StepObserver), by strategy and step. The
// load harness turns its sums and counts into each step's mean time over a
// capacity step, and the lock strategies' bound from those (see
// strategy.HeldSteps).
type saleSteps struct {
	vec *prometheus.HistogramVec
	// byKey holds the series of every lock strategy and step, made at
	// start-up and only read after: an observation costs a map lookup,
	// not the label hashing of WithLabelValues.
	byKey map[stepKey]prometheus.Observer
}

type stepKey struct{ strategy, step string }

func newSaleSteps(reg prometheus.Registerer) *saleSteps {
	s := &saleSteps{
		vec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "stock_sale_step_seconds",
			Help: "Time of each step of a sale under a lock (lock, read, write, release, ledger, unpend), by strategy: one round trip each, but lock, which includes the wait for the lock.",
			// From a loopback round trip to a long wait for the lock.
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}, []string{"strategy", "step"}),
		byKey: map[stepKey]prometheus.Observer{},
	}
	reg.MustRegister(s.vec)
	for _, in := range strategy.All() {
		if !in.Locks() {
			continue
		}
		for _, step := range strategy.SaleSteps {
			s.byKey[stepKey{in.Name, step}] = s.vec.WithLabelValues(in.Name, step)
		}
	}
	return s
}

// SaleStep implements inventory.StepObserver.
func (m *metrics) SaleStep(strategy, step string, took time.Duration) {
	if o, ok := m.saleSteps.byKey[stepKey{strategy, step}]; ok {
		o.Observe(took.Seconds())
		return
	}
	m.saleSteps.vec.WithLabelValues(strategy, step).Observe(took.Seconds())
}
