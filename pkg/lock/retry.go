package lock

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// RetryPolicy is capped exponential backoff with full jitter: before retry n
// (from 0) a blocking Acquire sleeps a uniformly random time in
// [0, min(Max, Min*2^n)]. Full jitter spreads contenders out so that they do
// not retry in lockstep and queue behind each other's writes on the server,
// which is what starves a holder's renewal on a slow store.
//
// The wait always ends early when the context ends, when a Notifier
// backend reports that the key was released, and when a Handoff backend
// hands the key over. A waiter queued by a Handoff backend sleeps the whole
// cap, min(Max, Min*2^n), without jitter: the queue already orders the
// waiters, and its retries are only the fallback for a lost handoff.
type RetryPolicy struct {
	Min time.Duration // the first retry's cap; must be > 0
	Max time.Duration // the largest wait; must be >= Min
	// Attempts bounds the number of attempts; 0 means until the context ends.
	Attempts int
}

func (p RetryPolicy) validate() error {
	if p.Min <= 0 || p.Max < p.Min || p.Attempts < 0 {
		return fmt.Errorf("%w: retry policy %+v needs 0 < Min <= Max and Attempts >= 0", ErrBadConfig, p)
	}
	return nil
}

// backoff returns the sleep before retry n.
func (p RetryPolicy) backoff(n int) time.Duration {
	return rand.N(p.ceiling(n) + 1)
}

// ceiling returns the cap of the sleep before retry n, min(Max, Min*2^n).
func (p RetryPolicy) ceiling(n int) time.Duration {
	ceil := p.Max
	if n < 32 {
		if d := p.Min << n; d > 0 && d < ceil {
			ceil = d
		}
	}
	return ceil
}
