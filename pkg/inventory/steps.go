package inventory

import "time"

// StepObserver is an optional interface of a LockedConfig's Observer: a
// Locked strategy whose Observer implements it reports the time of each
// step of its sales (each round trip, whatever its outcome). SaleStep must
// be cheap and safe for concurrent use.
type StepObserver interface {
	SaleStep(strategy, step string, took time.Duration)
}

// stepTimer reports steps of one strategy to a StepObserver; its zero
// value reports nothing.
type stepTimer struct {
	obs      StepObserver
	strategy string
}

// since reports step as having started at start.
func (t stepTimer) since(step string, start time.Time) {
	if t.obs != nil {
		t.obs.SaleStep(t.strategy, step, time.Since(start))
	}
}
