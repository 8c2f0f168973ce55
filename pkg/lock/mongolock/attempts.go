package mongolock

import (
	"context"
	"sync"
)

// attempts lets one TryAcquire per key and Backend talk to the server at a
// time; the others wait their turn, in arrival order.
//
// Why: the goroutines of one process that wait for the same key would
// otherwise poll the server side by side, and when they outnumber what the
// server answers per backoff period, every poll slows every other one, and
// the holder's renewals with them (docs/benchmarks.md#mongodb has the numbers).
// Queued here, a process puts at most one
// attempt per key on the server at once however many goroutines wait, and
// Refresh and Release, which never queue here, keep their place.
//
// A waiter that sees a sibling of another owner acquire the key while it
// waited answers lock.ErrNotAcquired without asking the server: that grant
// completed during its call, so at that moment the key was held by another
// owner, which is all ErrNotAcquired claims.
type attempts struct {
	mu   sync.Mutex
	keys map[string]*keyTurn
}

type keyTurn struct {
	turn   chan struct{} // holds a value while an attempt is in flight
	users  int           // callers waiting or attempting; the entry goes at 0
	grants uint64        // successful grants through this Backend
	last   string        // owner of the latest of them
}

// wait blocks until it is the caller's turn for key, or ctx ends. It reports
// whether another owner was granted the key meanwhile. Unless wait returns
// an error, the caller must call done with the outcome of its attempt.
func (a *attempts) wait(ctx context.Context, key, owner string) (takenMeanwhile bool, done func(granted bool), err error) {
	a.mu.Lock()
	if a.keys == nil {
		a.keys = make(map[string]*keyTurn)
	}
	k := a.keys[key]
	if k == nil {
		k = &keyTurn{turn: make(chan struct{}, 1)}
		a.keys[key] = k
	}
	k.users++
	seen := k.grants
	a.mu.Unlock()

	select {
	case k.turn <- struct{}{}:
	case <-ctx.Done():
		a.leave(key, k)
		return false, nil, ctx.Err()
	}

	a.mu.Lock()
	taken := k.grants != seen && k.last != owner
	a.mu.Unlock()
	return taken, func(granted bool) {
		// Record the grant before passing the turn on, so that the next
		// in line sees it.
		if granted {
			a.mu.Lock()
			k.grants++
			k.last = owner
			a.mu.Unlock()
		}
		<-k.turn
		a.leave(key, k)
	}, nil
}

func (a *attempts) leave(key string, k *keyTurn) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if k.users--; k.users == 0 {
		delete(a.keys, key)
	}
}
