package mongostore

import (
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"
)

// stepTimer reports steps of one strategy to a StepObserver; its zero
// value reports nothing.
type stepTimer struct {
	obs      inventory.StepObserver
	strategy string
}

// since reports step as having started at start.
func (t stepTimer) since(step string, start time.Time) {
	if t.obs != nil {
		t.obs.SaleStep(t.strategy, step, time.Since(start))
	}
}
