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
	every   time.Duration // renewal period; 0: no automatic renewal

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu     sync.Mutex
	expiry time.Time
	guards map[*context.CancelCauseFunc]struct{} // live Guard contexts

	// The watchdog is one timer, not a goroutine: it fires at the next
	// renewal or at the expiry, whichever comes first, and runs the renewal
	// in the timer's own goroutine.
	timer      *time.Timer
	next       time.Time          // when the next renewal is due
	stopped    bool               // Release has begun: the watchdog does nothing more
	refreshing context.CancelFunc // cancels the watchdog's renewal in flight, if any
	refreshed  chan struct{}      // closed when that renewal returns, if Release waits for it

	observer    Observer  // see WithObserver; nil: none
	since       time.Time // when the lease was handed to its holder
	endReported bool      // Ended was called
}

func newLease(b Backend, key, owner string, token uint64, ttl time.Duration, expiry time.Time, renewFraction float64) *Lease {
	ctx, cancel := context.WithCancelCause(context.Background())
	l := &Lease{
		backend: b, key: key, owner: owner, token: token, ttl: ttl,
		every: time.Duration(float64(ttl) * renewFraction),
		ctx:   ctx, cancel: cancel, expiry: expiry,
	}
	// Count the first renewal from when the grant was asked for, not from
	// now: a slow grant has already used part of the TTL.
	l.next = expiry.Add(l.every - ttl)
	l.mu.Lock()
	l.arm(time.Now())
	l.mu.Unlock()
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
	if l.guards == nil {
		l.guards = make(map[*context.CancelCauseFunc]struct{})
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
	if l.timer != nil {
		l.timer.Stop()
	}
	for cancel := range l.guards {
		(*cancel)(cause)
	}
	clear(l.guards)
	o := l.observer
	report := o != nil && !l.endReported
	l.endReported = l.endReported || report
	since := l.since
	l.mu.Unlock()
	if report {
		o.Ended(l.key, time.Since(since), cause)
	}
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
	l.mu.Lock()
	o := l.observer
	l.mu.Unlock()
	// A renewal cancelled by Release is not a failure.
	if o != nil && !errors.Is(ctx.Err(), context.Canceled) {
		o.RefreshFailed(l.key, err)
	}
	// The backend's error names the operation, the key and the token.
	return err
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
	// The backend's error names the operation, the key and the token.
	return err
}

// lose ends the lease as lost because of err, a backend's answer that
// names the key and the token.
func (l *Lease) lose(err error) {
	l.end(fmt.Errorf("%w: %w", ErrLeaseLost, err))
}

// stopWatchdog stops the timer and, if a renewal is in flight, cancels it
// and waits for it to return, so that nothing is refreshed after Release
// begins and Release never waits for a slow refresh.
func (l *Lease) stopWatchdog() {
	l.mu.Lock()
	l.stopped = true
	if l.timer != nil {
		l.timer.Stop()
	}
	var wait chan struct{}
	if l.refreshing != nil {
		l.refreshing()
		if l.refreshed == nil {
			l.refreshed = make(chan struct{})
		}
		wait = l.refreshed
	}
	l.mu.Unlock()
	if wait != nil {
		<-wait
	}
}

// arm sets the watchdog's timer for the next renewal or the expiry,
// whichever comes first. l.mu must be held.
func (l *Lease) arm(now time.Time) {
	wait := l.expiry.Sub(now)
	if l.every > 0 {
		wait = min(wait, l.next.Sub(now))
	}
	wait = max(wait, 0)
	if l.timer == nil {
		l.timer = time.AfterFunc(wait, l.tick)
	} else {
		l.timer.Reset(wait)
	}
}

// tick is the watchdog: it renews the lease every fraction of its TTL and
// declares it lost when its expiry passes without a successful renewal. It
// runs even with renewal off, so that Done closes when an unrefreshed lease
// expires.
func (l *Lease) tick() {
	l.mu.Lock()
	if l.stopped || l.ctx.Err() != nil {
		l.mu.Unlock()
		return
	}
	now := time.Now()
	if expiry := l.expiry; !now.Before(expiry) {
		l.mu.Unlock()
		l.end(fmt.Errorf("%w: %q token %d expired at %s before a refresh succeeded",
			ErrLeaseLost, l.key, l.token, expiry.Format(time.RFC3339Nano)))
		return
	}
	if l.every <= 0 || now.Before(l.next) {
		l.arm(now) // the expiry moved (a manual Refresh), or woken early
		l.mu.Unlock()
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), l.expiry)
	l.refreshing = cancel
	l.mu.Unlock()

	err := l.Refresh(ctx)
	cancel()

	l.mu.Lock()
	defer l.mu.Unlock()
	l.refreshing = nil
	if l.refreshed != nil {
		close(l.refreshed) // Release is waiting
		l.refreshed = nil
	}
	switch now = time.Now(); {
	case err == nil:
		l.next = now.Add(l.every)
	case errors.Is(err, ErrNotHeld):
		return // Refresh has ended the lease
	default:
		// Try again sooner: the lease has at most two more renewal
		// periods left.
		l.next = now.Add(max(l.every/4, time.Millisecond))
	}
	if !l.stopped && l.ctx.Err() == nil {
		l.arm(now)
	}
}
