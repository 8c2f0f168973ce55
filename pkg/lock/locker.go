package lock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Locker acquires leases from one Backend. It is safe for concurrent use;
// every acquisition gets its own owner identity unless WithOwner says
// otherwise.
type Locker struct {
	backend Backend
	opts    options
	floor   time.Duration
}

// New returns a Locker over backend. The options become the defaults of
// every Acquire and TryAcquire, which may override them.
func New(backend Backend, opts ...Option) (*Locker, error) {
	if backend == nil {
		return nil, fmt.Errorf("%w: nil backend", ErrInvalidArgument)
	}
	l := &Locker{backend: backend, opts: defaultOptions(), floor: MinTTL}
	if f, ok := backend.(TTLFloor); ok && f.MinTTL() > l.floor {
		l.floor = f.MinTTL()
	}
	for _, opt := range opts {
		opt(&l.opts)
	}
	// Validate the defaults with a placeholder key so that a bad TTL or
	// retry policy is reported at construction, not at the first request.
	if err := l.opts.validate("k", l.floor); err != nil {
		return nil, err
	}
	return l, nil
}

// MinTTL returns the shortest TTL this Locker accepts.
func (l *Locker) MinTTL() time.Duration { return l.floor }

// TryAcquire makes exactly one attempt. It returns ErrNotAcquired at once
// when another owner holds the key.
func (l *Locker) TryAcquire(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	o, err := l.resolve(key, opts)
	if err != nil {
		return nil, err
	}
	owner := o.ownerFor()
	lease, err := l.attempt(ctx, key, owner, o)
	if err != nil && !errors.Is(err, ErrNotAcquired) {
		l.abandon(key, owner, o)
	}
	return lease, err
}

// Acquire blocks until it holds key, ctx ends, or the retry policy's
// Attempts run out (then the error wraps ErrNotAcquired).
//
// A failed attempt whose outcome is unknown (a timeout, a dropped
// connection) is retried with the same owner identity, which the backend
// grants again if the lost reply had in fact granted it. When Acquire gives
// up, it releases (in the background) any lease of its own that a lost reply
// may have left on the server: a cancelled wait does not leave the key
// locked until its TTL runs out.
func (l *Locker) Acquire(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	o, err := l.resolve(key, opts)
	if err != nil {
		return nil, err
	}
	owner := o.ownerFor()

	// Watch before the first attempt: a release that lands between a
	// failed attempt and the wait would otherwise go unnoticed.
	var released <-chan struct{}
	if n, ok := l.backend.(Notifier); ok {
		var stop func()
		released, stop = n.Watch(ctx, key)
		defer stop()
	}

	uncertain := false // an attempt may have been granted without our knowing
	for n := 0; ; n++ {
		lease, err := l.attempt(ctx, key, owner, o)
		if err == nil {
			return lease, nil
		}
		if errors.Is(err, ErrInvalidArgument) {
			return nil, err
		}
		if !errors.Is(err, ErrNotAcquired) {
			uncertain = true
		}
		if ctx.Err() != nil {
			if uncertain {
				l.abandon(key, owner, o)
			}
			return nil, fmt.Errorf("lock: acquire %q: %w (last attempt: %w)", key, context.Cause(ctx), err)
		}
		if o.retry.Attempts > 0 && n+1 >= o.retry.Attempts {
			if uncertain {
				l.abandon(key, owner, o)
			}
			if errors.Is(err, ErrNotAcquired) {
				return nil, fmt.Errorf("lock: acquire %q: gave up after %d attempts: %w", key, n+1, err)
			}
			return nil, fmt.Errorf("lock: acquire %q: gave up after %d attempts: %w (last attempt: %w)", key, n+1, ErrNotAcquired, err)
		}

		t := time.NewTimer(o.retry.backoff(n))
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-released:
		}
		t.Stop()
	}
}

func (l *Locker) resolve(key string, opts []Option) (options, error) {
	o := l.opts
	for _, opt := range opts {
		opt(&o)
	}
	return o, o.validate(key, l.floor)
}

func (l *Locker) attempt(ctx context.Context, key, owner string, o options) (*Lease, error) {
	// The lease's local expiry counts from before the request was sent, so
	// the holder always believes it expires no later than the server does.
	start := time.Now()
	token, err := l.backend.TryAcquire(ctx, key, owner, o.ttl)
	if err != nil {
		return nil, err
	}
	return newLease(l.backend, key, owner, token, o.ttl, start.Add(o.ttl), o.renewFraction), nil
}

// abandon releases, in the background, whatever lease owner may hold on key
// after an attempt whose reply was lost. Taking the key again as the same
// owner succeeds only if we hold it (or it is free), and returns the token
// the release needs. The caller does not wait for it: it has given up, and
// its deadline has passed.
//
// With an explicit owner (WithOwner) nothing is abandoned: that identity may
// hold a live lease elsewhere in the process, which re-taking and releasing
// would destroy. A lost grant then lasts until its TTL, or until the owner
// acquires again.
func (l *Locker) abandon(key, owner string, o options) {
	if o.owner != "" {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		token, err := l.backend.TryAcquire(ctx, key, owner, o.ttl)
		if err != nil {
			return
		}
		_ = l.backend.Release(ctx, key, owner, token)
	}()
}
