package redislock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stocklock/stocklock/pkg/lock"
)

// Waiter implements lock.Handoff: a place in key's queue for owner, whose
// grants arrive on the backend's subscription. It does no I/O; the
// subscription is started in the background if it is not running yet.
func (b *Backend) Waiter(key, owner string) lock.Waiter {
	w := &waiter{b: b, key: key, owner: owner, ownerArg: owner, grants: make(chan uint64, 1)}
	w.seq = b.notify.addWaiter(w)
	w.idArg = b.id + ":" + strconv.FormatUint(w.seq, 10)
	return w
}

type waiter struct {
	b          *Backend
	key, owner string
	seq        uint64     // this waiter's number in its backend
	idArg      any        // "<backend id>:<seq>", its name in the queue
	ownerArg   any        // owner, boxed once
	names      *lockNames // the lock's keys, found at the first attempt
	ttl        time.Duration
	ttlArg     any // ttl, as the scripts take it
	stay       time.Duration
	stayArg    any    // stay, as wait.lua takes it
	deadline   string // the deadline of the waiter's place, "" if none
	grants     chan uint64
}

func (w *waiter) lockNames() *lockNames {
	if w.names == nil {
		w.names = w.b.names(w.key)
	}
	return w.names
}

// Attempt implements lock.Waiter with wait.lua.
func (w *waiter) Attempt(ctx context.Context, ttl, stay time.Duration) (token, latest uint64, err error) {
	if err := lock.CheckArgs(w.key, w.owner, ttl); err != nil {
		return 0, 0, fmt.Errorf("redislock: acquire %q: %w", w.key, err)
	}
	first := w.ttlArg == nil // no attempt was sent yet
	if first || ttl != w.ttl {
		w.ttl, w.ttlArg = ttl, ttlArg(ttl)
	}
	if w.stayArg == nil || stay != w.stay {
		w.stay, w.stayArg = stay, ttlArg(stay)
	}
	queueTTLArg := w.b.queueTTLArg
	if stay > queueTTL {
		queueTTLArg = w.stayArg
	}
	names := w.lockNames()
	// A waiter's first attempt on a key that was contended a moment ago
	// joins the queue first, with a deadline from the server's clock as
	// last reported (wait.lua).
	var estimate string
	if first {
		estimate = names.clock.Load().deadline(stay)
	}
	res, err := waitScript.Run(ctx, w.b.client, names.keys,
		w.ownerArg, w.ttlArg, w.idArg, w.stayArg, queueTTLArg, w.deadline, estimate).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("redislock: acquire %q: %w", w.key, err)
	}
	switch r := res.(type) {
	case int64:
		if r > 0 {
			return uint64(r), 0, nil
		}
	case string: // "<latest>:<deadline>"
		l, d, ok := strings.Cut(r, ":")
		if latest, err := strconv.ParseUint(l, 10, 64); ok && err == nil {
			w.deadline = d
			if estimate == "" {
				names.clock.Store(readClock(d, stay))
			}
			return 0, latest, fmt.Errorf("redislock: acquire %q: queued: %w", w.key, lock.ErrNotAcquired)
		}
	}
	return 0, 0, fmt.Errorf("redislock: acquire %q: unexpected reply %v (%T)", w.key, res, res)
}

// Granted implements lock.Waiter.
func (w *waiter) Granted() <-chan uint64 { return w.grants }

// Leave implements lock.Waiter with leave.lua.
func (w *waiter) Leave(ctx context.Context) error {
	defer w.Close()
	if w.ttlArg == nil {
		return nil // it never attempted, so it is not queued
	}
	n := w.lockNames()
	res, err := leaveScript.Run(ctx, w.b.client, n.keys,
		w.ownerArg, w.ttlArg, w.idArg, w.deadline, n.channelArg, w.b.idArg, w.b.grantPfxArg, w.b.queueTTLArg).Result()
	if err != nil {
		return fmt.Errorf("redislock: leave the queue of %q: %w", w.key, err)
	}
	if r, ok := res.(int64); ok && r == 0 {
		return nil // nothing had been handed to this waiter
	}
	handed, err := w.b.passedOn(res)
	if err != nil {
		return fmt.Errorf("redislock: leave the queue of %q: %w", w.key, err)
	}
	if !handed {
		w.b.notify.released(w.key, 0)
	}
	return nil
}

// Close implements lock.Waiter.
func (w *waiter) Close() { w.b.notify.removeWaiter(w.seq) }

// deliver passes token to the waiter without blocking. A newer grant
// replaces one not yet taken (tokens only grow, and an older grant has
// ended if a newer one exists); 0, a hint to attempt now, is dropped when
// anything is pending.
func (w *waiter) deliver(token uint64) {
	for {
		select {
		case w.grants <- token:
			return
		default:
		}
		select {
		case old := <-w.grants:
			token = max(token, old)
		default:
		}
	}
}

// clockFresh is how long a reading of the server's clock serves the
// deadlines of new places (wait.lua's queue first). An older one is not
// used: the attempt reads the clock itself, and reports it.
const clockFresh = 500 * time.Millisecond

// serverClock is the server's clock as an attempt read it: ms on the
// server, at a local instant no earlier than the reading (when its reply
// had arrived).
type serverClock struct {
	ms int64
	at time.Time // with the monotonic clock
}

// readClock returns the clock an attempt that queued with deadline d (from
// the server's clock in ms, plus stay) reported.
func readClock(d string, stay time.Duration) *serverClock {
	ms, err := strconv.ParseInt(d, 10, 64)
	if err != nil {
		return nil
	}
	return &serverClock{ms: ms - millis(stay), at: time.Now()}
}

// deadline returns the deadline of a place kept for stay, sent now, on the
// server's clock: the last reading plus the local time elapsed since, in
// whole ms, plus stay; "" when there is no reading under clockFresh old.
// The reading was taken before its reply arrived, and the attempt will run
// after it is sent, so this is never later than the deadline the server
// would give from its own clock (as long as both clocks run at the same
// rate: over clockFresh, microseconds apart).
func (c *serverClock) deadline(stay time.Duration) string {
	if c == nil {
		return ""
	}
	elapsed := time.Since(c.at)
	if elapsed >= clockFresh {
		return ""
	}
	return strconv.FormatInt(c.ms+int64(elapsed/time.Millisecond)+millis(stay), 10)
}
