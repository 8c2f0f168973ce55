package inventory

import "time"

// LockObserver is told what a Locked strategy does with its lock, for
// metrics. Methods must be cheap and safe for concurrent use.
type LockObserver interface {
	// LockWaited reports one Acquire: how long it waited and whether it got
	// the lock.
	LockWaited(strategy string, waited time.Duration, acquired bool)
	// LockHeld reports a lease taken (+1) or given up (-1).
	LockHeld(strategy string, delta int)
}

// StepObserver is an optional interface of a LockedConfig's Observer: a
// Locked strategy whose Observer implements it reports the time of each
// step of its sales (each round trip, whatever its outcome). SaleStep must
// be cheap and safe for concurrent use.
type StepObserver interface {
	SaleStep(strategy, step string, took time.Duration)
}
