package mongostore

import (
	"context"
	"sync"
)

// keyQueue admits one caller per key at a time, in roughly arrival order.
//
// A Locked strategy queues its requests here before it asks the lock
// service, so that each replica has at most one request per item polling
// the lock. Without it, every waiting request polls on its own backoff: with
// 32 waiters on one item, the mongo-lease strategy sent hundreds of failed
// findAndModify calls a second to the same MongoDB that must also serve the
// holder's reads, writes and lease renewals. Renewals queued behind them
// past the TTL and leases expired mid-sale. The queue changes no guarantee:
// exclusion between replicas still comes from the lock, and between
// holders from the fence.
type keyQueue struct {
	mu    sync.Mutex
	slots map[string]*slot
}

type slot struct {
	turn chan struct{} // holds a value while a caller is admitted
	refs int           // callers admitted or waiting
}

func newKeyQueue() *keyQueue { return &keyQueue{slots: make(map[string]*slot)} }

// enter waits for key's turn. It returns a function that ends the turn, or
// ctx's cause if ctx ends first.
func (q *keyQueue) enter(ctx context.Context, key string) (leave func(), err error) {
	q.mu.Lock()
	s := q.slots[key]
	if s == nil {
		s = &slot{turn: make(chan struct{}, 1)}
		q.slots[key] = s
	}
	s.refs++
	q.mu.Unlock()

	select {
	case s.turn <- struct{}{}:
		var once sync.Once
		return func() {
			once.Do(func() {
				<-s.turn
				q.drop(key, s)
			})
		}, nil
	case <-ctx.Done():
		q.drop(key, s)
		return nil, context.Cause(ctx)
	}
}

// drop forgets a caller, and the key once nobody waits for it, so that the
// table does not grow with every sku ever sold.
func (q *keyQueue) drop(key string, s *slot) {
	q.mu.Lock()
	defer q.mu.Unlock()
	s.refs--
	if s.refs == 0 {
		delete(q.slots, key)
	}
}
