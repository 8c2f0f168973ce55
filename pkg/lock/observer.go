package lock

import (
	"context"
	"time"
)

// Observer is told what a Locker's leases do, for metrics and logs; set it
// with WithObserver. Its methods are called synchronously on the lock's own
// paths: they must be cheap, must not block, and must be safe for
// concurrent use. The package imports no metrics library; the caller turns
// these calls into whatever it exports.
type Observer interface {
	// Acquired reports a lease granted by Acquire or TryAcquire, and how
	// long the call took.
	Acquired(key string, waited time.Duration)
	// NotAcquired reports an Acquire or TryAcquire that returned without
	// a lease, and why.
	NotAcquired(key string, waited time.Duration, err error)
	// RefreshFailed reports a renewal that failed. The lease may still be
	// held: Ended says when it is not.
	RefreshFailed(key string, err error)
	// Ended reports, once per lease, how long it was held and why it
	// ended: cause is ErrReleased, or wraps ErrLeaseLost.
	Ended(key string, held time.Duration, cause error)
}

// WithObserver makes every lease of the Locker (or of one Acquire) report
// to o. Default: none.
func WithObserver(o Observer) Option { return func(opts *options) { opts.observer = o } }

// observed runs acquire and reports its outcome to o, and hands o the
// lease so that it reports the lease's renewals and end.
func observed(ctx context.Context, o Observer, key string, acquire func(context.Context) (*Lease, error)) (*Lease, error) {
	if o == nil {
		return acquire(ctx)
	}
	start := time.Now()
	lease, err := acquire(ctx)
	if err != nil {
		o.NotAcquired(key, time.Since(start), err)
		return nil, err
	}
	o.Acquired(key, time.Since(start))
	lease.observe(o, time.Now())
	return lease, nil
}

// observe starts reporting to o; a lease that ended before (its watchdog
// can end it at any time) reports its end at once.
func (l *Lease) observe(o Observer, since time.Time) {
	l.mu.Lock()
	l.observer, l.since = o, since
	ended := l.ctx.Err() != nil && !l.endReported
	l.endReported = l.endReported || ended
	l.mu.Unlock()
	if ended {
		o.Ended(l.key, time.Since(since), context.Cause(l.ctx))
	}
}
