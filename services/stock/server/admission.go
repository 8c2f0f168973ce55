package server

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
)

// Why a sale request was shed (the reason label of stock_sales_shed_total).
const (
	shedQueueFull  = "queue_full"  // every working slot and every place in the queue was taken
	shedQueueWait  = "queue_wait"  // it waited past the age limit (or past the standing-queue target)
	shedClientGone = "client_gone" // its client hung up (its context ended) before it got a slot
)

// shedReasons lists every shed reason, for the metrics' zero series.
var shedReasons = []string{shedQueueFull, shedQueueWait, shedClientGone}

// admission bounds the sale requests of a replica that work at once (and
// so the MongoDB connections and locks they can hold), lets a bounded
// number more wait a bounded time for a slot, and sheds the rest at once
// (docs/overload.md). It is the replica's only queue for sales: requests
// past it do the store work, requests before it have done none.
//
// The queue is served oldest first while it drains; once it has not been
// empty for a whole interval (a standing queue: the replica gets more than
// it can serve), it is served newest first, a waiter that joins it waits
// at most target, and a waiter older than target is dropped when a slot
// frees (Facebook's CoDel with adaptive LIFO, with its interval of 100 ms
// and target of 5 ms): under overload the requests served are the ones
// whose buyers are still there, and a request shed after waiting is shed
// within milliseconds instead of after maxWait.
//
// The queue is no longer than the slots can serve within the wait it
// allows (maxWait, or target while it stands), by the mean time a request
// has held a slot lately: a request that could not be served in time is
// shed at once, not after waiting for nothing. On one hot sku, where each
// sale holds its slot for hundreds of milliseconds under a herd, that is a
// queue of a few, and nearly every shed answer takes microseconds.
type admission struct {
	limit    int           // requests working at once
	queue    int           // requests waiting at most
	maxWait  time.Duration // longest a request waits while the queue drains
	interval time.Duration // CoDel's: the queue not empty for this long stands
	target   time.Duration // CoDel's: longest a request waits while the queue stands
	shed     func(reason string)
	now      func() time.Time

	mu        sync.Mutex
	working   int
	waiting   []*waiter     // oldest first
	hold      time.Duration // a moving mean of how long admitted requests held their slot; 0 before the first release
	busySince time.Time     // when the queue last went from empty to not empty (set by acquire)
	// standsUntil keeps the queue standing for an interval after a
	// release found it standing or a waiter waited in vain: dropping
	// every waiter too old empties it, and the next waiter must not
	// start a queue that drains.
	standsUntil time.Time
}

// CoDel's interval and target (Facebook's "Fail at Scale"), each at most
// the age limit.
const (
	codelInterval = 100 * time.Millisecond
	codelTarget   = 5 * time.Millisecond
)

// waiter is a request waiting for a slot. done receives true when the
// slot is handed to it, false when it is dropped.
type waiter struct {
	since time.Time
	done  chan bool
}

// newAdmission returns an admission of limit working requests and queue
// waiting ones, waiting at most maxWait. shed is told of every request
// shed, with its reason.
func newAdmission(limit, queue int, maxWait time.Duration, shed func(reason string)) *admission {
	return &admission{
		limit: limit, queue: queue, maxWait: maxWait, interval: min(maxWait, codelInterval), target: min(maxWait, codelTarget),
		shed: shed, now: time.Now,
	}
}

// acquire returns a release function when the request may work, to be
// called once it has answered; or the reason it is shed. A request whose
// context ends while it waits is shed, never admitted.
func (a *admission) acquire(ctx context.Context) (release func(), reason string) {
	if ctx.Err() != nil {
		return nil, a.drop(shedClientGone)
	}
	a.mu.Lock()
	now := a.now()
	if a.working < a.limit && len(a.waiting) == 0 {
		a.working++
		a.mu.Unlock()
		return a.releaser(now), ""
	}
	if len(a.waiting) >= a.room(now) {
		a.mu.Unlock()
		return nil, a.drop(shedQueueFull)
	}
	w := &waiter{since: now, done: make(chan bool, 1)}
	if len(a.waiting) == 0 {
		a.busySince = w.since
	}
	a.waiting = append(a.waiting, w)
	wait := a.patience(w.since)
	a.mu.Unlock()

	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case ok := <-w.done:
		if ok {
			return a.releaser(a.now()), ""
		}
		return nil, a.drop(shedQueueWait) // dropped by a release: too old for a standing queue
	case <-ctx.Done():
		reason = shedClientGone
	case <-t.C:
		reason = shedQueueWait
	}
	a.mu.Lock()
	if reason == shedQueueWait {
		a.standsUntil = a.now().Add(a.interval)
	}
	removed := a.remove(w)
	a.mu.Unlock()
	if !removed && <-w.done {
		a.release(0) // a slot was handed over as the wait ended: pass it on
	}
	return nil, a.drop(reason)
}

// holdWeight is the weight of the latest hold in the moving mean.
const holdWeight = 0.2

// room is how many may wait now: the queue's bound, or fewer, as many as
// the slots can serve, by the mean hold, within the patience of a
// newcomer (at least one). a.mu must be held.
func (a *admission) room(now time.Time) int {
	if a.hold <= 0 {
		return a.queue
	}
	return min(a.queue, max(1, int(float64(a.patience(now))*float64(a.limit)/float64(a.hold))))
}

// patience is how long a request that joins the queue at now may wait:
// the target while the queue stands, else the age limit. a.mu must be
// held.
func (a *admission) patience(now time.Time) time.Duration {
	if a.standing(now) {
		return a.target
	}
	return a.maxWait
}

// releaser is the release of a slot taken at since.
func (a *admission) releaser(since time.Time) func() {
	return func() { a.release(a.now().Sub(since)) }
}

// release gives back a working slot held for held (0: not counted in the
// mean): to a waiter if one is due, else to the pool.
func (a *admission) release(held time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if held > 0 {
		if a.hold == 0 {
			a.hold = held
		} else {
			a.hold += time.Duration(holdWeight * float64(held-a.hold))
		}
	}
	now := a.now()
	if len(a.waiting) > 0 && a.standing(now) {
		// A standing queue: drop the waiters too old to be worth serving,
		// serve the newest.
		a.standsUntil = now.Add(a.interval)
		for len(a.waiting) > 0 && now.Sub(a.waiting[0].since) > a.target {
			a.waiting[0].done <- false
			a.waiting = a.waiting[1:]
		}
		if n := len(a.waiting); n > 0 {
			w := a.waiting[n-1]
			a.waiting = a.waiting[:n-1]
			w.done <- true
			return
		}
	}
	if len(a.waiting) > 0 {
		w := a.waiting[0]
		a.waiting = a.waiting[1:]
		w.done <- true
		return
	}
	a.working--
}

// standing reports whether the queue stands at now: it has not been empty
// for a whole interval, or less than an interval ago a release found it
// standing or a waiter waited in vain. a.mu must be held.
func (a *admission) standing(now time.Time) bool {
	return len(a.waiting) > 0 && now.Sub(a.busySince) >= a.interval || now.Before(a.standsUntil)
}

// remove takes w out of the queue, and reports whether it was there. a.mu
// must be held.
func (a *admission) remove(w *waiter) bool {
	for i, x := range a.waiting {
		if x == w {
			a.waiting = append(a.waiting[:i], a.waiting[i+1:]...)
			return true
		}
	}
	return false
}

func (a *admission) drop(reason string) string {
	if a.shed != nil {
		a.shed(reason)
	}
	return reason
}

// counts returns the requests working and waiting now.
func (a *admission) counts() (working, waiting int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.working, len(a.waiting)
}

// receivedKey is the echo.Context key of the time a request reached the
// replica's handlers (its first middleware).
const receivedKey = "received"

// admitSale runs next, a sale route's handler, once the sales admission
// lets it work, and answers 503 overloaded with Retry-After otherwise,
// having touched no store and no lock.
func (s *Server) admitSale(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		release, reason := s.sales.acquire(c.Request().Context())
		if release == nil {
			if at, ok := c.Get(receivedKey).(time.Time); ok {
				s.metrics.shedTime.Observe(time.Since(at).Seconds())
			}
			return overloaded(reason)
		}
		defer release()
		return next(c)
	}
}

// overloaded is the answer to a request shed by the sales admission.
func overloaded(reason string) *apiError {
	msg := "this replica is at its bound of sales at once and its queue is full; nothing was changed: retry after Retry-After, here or at another replica"
	switch reason {
	case shedQueueWait:
		msg = "this replica is overloaded: the request waited its longest for a turn; nothing was changed: retry after Retry-After, here or at another replica"
	case shedClientGone:
		msg = "the request's client went away before it got a turn; nothing was changed"
	}
	return newError(http.StatusServiceUnavailable, codeOverloaded, msg)
}
