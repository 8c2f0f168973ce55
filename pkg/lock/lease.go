package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Lease is a held lock. Its watchdog renews it in the background (unless
// renewal is off) until Release, and its context is cancelled the moment it
// is no longer held: released (cause ErrReleased) or lost (cause wraps
// ErrLeaseLost). Run the critical section under Ctx or Guard so that a lost
// lease stops it, and pass Token to every write it protects.
type Lease struct {
	backend Backend
	key     string
	owner   string
	token   uint64
	ttl     time.Duration

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu     sync.Mutex
	expiry time.Time
	guards map[*context.CancelCauseFunc]struct{} // live Guard contexts

	// stopCtx ends the watchdog, including a renewal it has in flight, so
	// that Release never waits for a slow refresh.
	stopCtx context.Context
	stopFn  context.CancelFunc
	stopped chan struct{}
}

func newLease(b Backend, key, owner string, token uint64, ttl time.Duration, expiry time.Time, renewFraction float64) *Lease {
	ctx, cancel := context.WithCancelCause(context.Background())
	stopCtx, stopFn := context.WithCancel(context.Background())
	l := &Lease{
		backend: b, key: key, owner: owner, token: token, ttl: ttl,
		ctx: ctx, cancel: cancel, expiry: expiry,
		guards:  make(map[*context.CancelCauseFunc]struct{}),
		stopCtx: stopCtx, stopFn: stopFn, stopped: make(chan struct{}),
	}
	go l.watchdog(renewFraction)
	return l
}

// Key returns the locked key.
func (l *Lease) Key() string { return l.key }

// Owner returns the identity the lease was granted to.
func (l *Lease) Owner() string { return l.owner }

// Token returns the fencing token: strictly greater than the token of every
// earlier lease on the same key.
func (l *Lease) Token() uint64 { return l.token }

// Expiry returns when the lease ends unless refreshed, by this process's
// clock. It is never later than the server's idea of the expiry.
func (l *Lease) Expiry() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiry
}

// Done is closed when the lease is released or lost.
func (l *Lease) Done() <-chan struct{} { return l.ctx.Done() }

// Ctx is cancelled when the lease is released or lost; context.Cause tells
// which (ErrReleased, or an error wrapping ErrLeaseLost).
func (l *Lease) Ctx() context.Context { return l.ctx }

// Err returns nil while the lease is held, else the reason it ended.
func (l *Lease) Err() error {
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

// Guard returns a child of parent that is also cancelled, with the lease's
// cause, when the lease ends. Use it for the critical section of a request:
// the request's deadline and the lease both bound the work. The child is
// already done when Release returns, or when the lease is declared lost.
func (l *Lease) Guard(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx.Err() != nil {
		cancel(context.Cause(l.ctx))
		return ctx, func() {}
	}
	l.guards[&cancel] = struct{}{}
	return ctx, func() {
		l.mu.Lock()
		delete(l.guards, &cancel)
		l.mu.Unlock()
		cancel(context.Canceled)
	}
}

// end cancels the lease's context and every Guard context with cause; the
// first cause given wins.
func (l *Lease) end(cause error) {
	l.cancel(cause)
	cause = context.Cause(l.ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	for cancel := range l.guards {
		(*cancel)(cause)
	}
	clear(l.guards)
}

// Refresh extends the lease by its TTL from now. It returns an error
// wrapping ErrNotHeld, and ends the lease as lost, when the server says the
// lease is no longer this one; other errors leave the lease as it was.
func (l *Lease) Refresh(ctx context.Context) error {
	if err := l.Err(); err != nil {
		return fmt.Errorf("lock: refresh %q: %w (%w)", l.key, ErrNotHeld, err)
	}
	start := time.Now()
	err := l.backend.Refresh(ctx, l.key, l.owner, l.token, l.ttl)
	switch {
	case err == nil:
		l.mu.Lock()
		if e := start.Add(l.ttl); e.After(l.expiry) {
			l.expiry = e
		}
		l.mu.Unlock()
		return nil
	case errors.Is(err, ErrNotHeld):
		l.lose(err)
	}
	return fmt.Errorf("lock: refresh %q: %w", l.key, err)
}

// Release stops the watchdog and frees the key. Releasing a lease that was
// already lost changes nothing on the server and returns ErrNotHeld; a
// second Release does the same. After Release the lease's context is done
// whatever the outcome.
func (l *Lease) Release(ctx context.Context) error {
	l.stopWatchdog()
	if err := l.Err(); err != nil {
		return fmt.Errorf("lock: release %q: %w (%w)", l.key, ErrNotHeld, err)
	}
	err := l.backend.Release(ctx, l.key, l.owner, l.token)
	switch {
	case err == nil:
		l.end(ErrReleased)
		return nil
	case errors.Is(err, ErrNotHeld):
		l.lose(err)
	default:
		// The outcome is unknown; the lease will expire on the server by
		// itself, and the holder has finished with it either way.
		l.end(ErrReleased)
	}
	return fmt.Errorf("lock: release %q: %w", l.key, err)
}

func (l *Lease) lose(reason error) {
	l.end(fmt.Errorf("%w: %q token %d: %w", ErrLeaseLost, l.key, l.token, reason))
}

func (l *Lease) stopWatchdog() {
	l.stopFn()
	<-l.stopped
}

// watchdog renews the lease every fraction of its TTL and declares it lost
// when its expiry passes without a successful renewal. It runs even with
// renewal off, so that Done closes when an unrefreshed lease expires.
func (l *Lease) watchdog(fraction float64) {
	defer close(l.stopped)
	every := time.Duration(float64(l.ttl) * fraction)
	// After a failed renewal, try again sooner: the lease has at most
	// two more renewal periods left.
	retry := max(every/4, time.Millisecond)
	// Count the first renewal from when the grant was asked for, not from
	// now: a slow grant has already used part of the TTL.
	next := l.Expiry().Add(every - l.ttl)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		expiry := l.Expiry()
		wait, renew := time.Until(expiry), false
		if fraction > 0 {
			if d := time.Until(next); d < wait {
				wait, renew = d, true
			}
		}
		t.Reset(max(wait, 0))
		select {
		case <-l.stopCtx.Done():
			return
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		if !renew {
			if !time.Now().Before(l.Expiry()) {
				l.lose(fmt.Errorf("expired at %s before a refresh succeeded", expiry.Format(time.RFC3339Nano)))
				return
			}
			continue
		}
		ctx, cancel := context.WithDeadline(l.stopCtx, l.Expiry())
		err := l.Refresh(ctx)
		cancel()
		switch {
		case err == nil:
			next = time.Now().Add(every)
		case errors.Is(err, ErrNotHeld):
			return
		default:
			next = time.Now().Add(retry)
		}
	}
}
