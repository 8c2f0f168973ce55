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
		return nil, fmt.Errorf("%w: nil backend", ErrBadConfig)
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
// when another owner holds the key. When the attempt's outcome is unknown,
// a grant it may have left is released in the background, as Acquire does.
func (l *Locker) TryAcquire(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	o, err := l.resolve(key, opts)
	if err != nil {
		return nil, err
	}
	return observed(ctx, o.observer, key, func(ctx context.Context) (*Lease, error) {
		owner := o.ownerFor()
		lease, err := l.attempt(ctx, key, owner, o)
		if err != nil && !errors.Is(err, ErrNotAcquired) {
			l.abandon(key, owner, o)
		}
		return lease, err
	})
}

// Acquire blocks until it holds key, ctx ends, or the retry policy's
// Attempts run out (then the error wraps ErrNotAcquired). Over a Handoff
// backend a refused attempt joins the key's queue and the key is handed
// over on release; the retry policy's attempts then only keep the place
// and catch a lost handoff message.
//
// A failed attempt whose outcome is unknown (a timeout, a dropped
// connection) is retried with the same owner identity, which the backend
// grants again if the lost reply had in fact granted it. When Acquire gives
// up, it releases (in the background) any lease of its own that a lost reply
// may have left on the server: a cancelled wait does not leave the key
// locked until its TTL runs out. Over a backend that implements
// OwnerReleaser, that clean-up never takes the key; see OwnerReleaser.
func (l *Locker) Acquire(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	o, err := l.resolve(key, opts)
	if err != nil {
		return nil, err
	}
	return observed(ctx, o.observer, key, func(ctx context.Context) (*Lease, error) {
		return l.acquire(ctx, key, o)
	})
}

// acquire is Acquire with its options resolved.
func (l *Locker) acquire(ctx context.Context, key string, o options) (*Lease, error) {
	owner := o.ownerFor()
	if h, ok := l.backend.(Handoff); ok {
		return l.acquireQueued(ctx, h.Waiter(key, owner), key, owner, o)
	}

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
			return nil, stopped(ctx, err)
		}
		if o.retry.Attempts > 0 && n+1 >= o.retry.Attempts {
			if uncertain {
				l.abandon(key, owner, o)
			}
			return nil, gaveUp(n+1, err)
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

// acquireQueued is Acquire over a Handoff backend: a refused attempt
// queues the waiter, and the key arrives through w.Granted when the holder
// releases it. The backoff timer stays as the fallback for a lost message
// and for a lease that expires instead of being released; each of its
// attempts also keeps the waiter's place in the queue.
func (l *Locker) acquireQueued(ctx context.Context, w Waiter, key, owner string, o options) (*Lease, error) {
	var (
		// since is no later than any grant still to come to this waiter:
		// the start of its latest refused attempt (a grant made before
		// that attempt ran would have been returned by it), or of its
		// first attempt. latest is the highest token granted before that
		// attempt ran; a grant not above it is stale.
		since     time.Time
		latest    uint64
		uncertain bool // an attempt may have been granted without our knowing
		granted   = w.Granted()
	)
	for n := 0; ; n++ {
		wait := o.retry.ceiling(n)
		start := time.Now()
		if since.IsZero() {
			since = start
		}
		token, last, err := w.Attempt(ctx, o.ttl, queueStay(wait, o.ttl))
		if err == nil {
			w.Close()
			// since, not start: the token may be a grant handed over
			// before this attempt was sent.
			return newLease(l.backend, key, owner, token, o.ttl, since.Add(o.ttl), o.renewFraction), nil
		}
		switch {
		case errors.Is(err, ErrInvalidArgument):
			w.Close()
			return nil, err
		case errors.Is(err, ErrNotAcquired):
			since, latest = start, last
		default:
			uncertain = true
		}
		if ctx.Err() == nil && o.retry.Attempts > 0 && n+1 >= o.retry.Attempts {
			l.leave(ctx, w, key, owner, o, uncertain)
			return nil, gaveUp(n+1, err)
		}

		t := time.NewTimer(wait)
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				waiting = false
			case <-t.C:
				waiting = false
			case token := <-granted:
				switch {
				case token == 0: // a grant may have been missed: attempt now
					waiting = false
				case token > latest:
					t.Stop()
					w.Close()
					return newLease(l.backend, key, owner, token, o.ttl, since.Add(o.ttl), o.renewFraction), nil
				} // else stale: keep waiting
			}
		}
		t.Stop()
		if ctx.Err() != nil {
			l.leave(ctx, w, key, owner, o, uncertain)
			return nil, stopped(ctx, err)
		}
	}
}

// gaveUp is the error of an Acquire whose retry policy ran out after n
// attempts, the last of which failed with err. err comes from the backend,
// which names the key; this adds only what the Locker knows. It wraps
// ErrNotAcquired even when the last attempt failed otherwise: the caller
// asked for the key and does not have it.
func gaveUp(n int, err error) error {
	if errors.Is(err, ErrNotAcquired) {
		return fmt.Errorf("lock: gave up after %d attempts: %w", n, err)
	}
	return fmt.Errorf("lock: gave up after %d attempts: %w (last attempt: %w)", n, ErrNotAcquired, err)
}

// stopped is the error of an Acquire whose context ended: its cause, and
// the last attempt's error, which names the key.
func stopped(ctx context.Context, err error) error {
	return fmt.Errorf("lock: stopped waiting: %w (last attempt: %w)", context.Cause(ctx), err)
}

// queueStay is how long a queued waiter keeps its place without attempting
// again: its next backoff, doubled, and a margin for the attempt's round
// trip. It is at most half the TTL, so that a grant handed over in that
// time leaves the lease at least half its TTL by the waiter's own reckoning
// (which counts from the attempt before the grant).
func queueStay(wait, ttl time.Duration) time.Duration {
	return min(2*wait+50*time.Millisecond, ttl/2)
}

// leave takes a waiter that gives up out of its queue before Acquire
// returns: a release after that must not hand the key to it. The caller's
// context may be done already, so leave has its own deadline.
func (l *Locker) leave(ctx context.Context, w Waiter, key, owner string, o options, uncertain bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = w.Leave(ctx) // if it fails, the place lapses after its stay
	if uncertain {
		l.abandon(key, owner, o)
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

// abandon frees, in the background, whatever lease owner may hold on key
// after an attempt whose reply was lost. The caller does not wait for it:
// it has given up, and its deadline has passed.
//
// Over an OwnerReleaser the lease is freed by owner alone, and the key is
// never taken: when no lost grant is left (the attempt was refused, or the
// lease has expired), nothing changes. Over any other backend abandon takes
// the key again as the same owner, which succeeds only if owner holds it or
// it is free, to learn the token the release needs; when the key is free,
// that holds it for a round trip, in which other owners are refused. Every
// backend in this module implements OwnerReleaser for that reason.
//
// With an explicit owner (WithOwner) nothing is abandoned: that identity may
// hold a live lease elsewhere in the process, which freeing would destroy.
// A lost grant then lasts until its TTL, or until the owner acquires again.
func (l *Locker) abandon(key, owner string, o options) {
	if o.owner != "" {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if r, ok := l.backend.(OwnerReleaser); ok {
			_ = r.ReleaseOwner(ctx, key, owner) // if it fails, the grant lasts until its TTL
			return
		}
		token, err := l.backend.TryAcquire(ctx, key, owner, o.ttl)
		if err != nil {
			return
		}
		_ = l.backend.Release(ctx, key, owner, token)
	}()
}
