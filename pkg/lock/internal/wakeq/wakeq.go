// Package wakeq is the queue of the local watchers of one lock key that a
// backend's notifier wakes when the key is released: first come, first
// woken, one at a time, since only one of them can take the key and waking
// them all sends them all to the server at once, where all but one lose
// and fall behind newcomers. redislock and etcdlock share it.
package wakeq

import "time"

// Watcher is one Watch call's place in a Queue. Its wake-ups arrive on C,
// which buffers one: a wake-up is pending until the watcher reads it.
type Watcher struct {
	C          chan struct{}
	sent       time.Time // when the last wake-up was sent
	prev, next *Watcher
}

// Queue is the watchers of one key, oldest first. The zero Queue is empty
// and ready to use. It is not safe for concurrent use: the notifier's lock
// guards it.
type Queue struct {
	head, tail *Watcher
}

// Push adds a new watcher at the end of the queue and returns it.
func (q *Queue) Push() *Watcher {
	w := &Watcher{C: make(chan struct{}, 1)}
	if q.tail == nil {
		q.head, q.tail = w, w
	} else {
		w.prev, q.tail.next, q.tail = q.tail, w, w
	}
	return w
}

// Remove takes w out of the queue and reports whether it had a wake-up
// pending, which it takes: a watcher that leaves without acting on its
// wake-up may pass it on (WakeOne). Remove a watcher once only.
func (q *Queue) Remove(w *Watcher) (pending bool) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	w.prev, w.next = nil, nil
	select {
	case <-w.C:
		return true
	default:
		return false
	}
}

// Empty reports whether the queue has no watchers.
func (q *Queue) Empty() bool { return q.head == nil }

// WakeOne wakes the longest-waiting watcher that has no wake-up pending.
// With hold > 0 it wakes none while some watcher's wake-up, sent less
// than hold ago, is still pending: that watcher is on its way to the key,
// and a second one would only race it. A wake-up pending for longer
// belongs to a watcher that stopped reading, which must not hold back the
// watchers behind it. The sends never block.
func (q *Queue) WakeOne(hold time.Duration) {
	now := time.Now()
	if hold > 0 {
		for w := q.head; w != nil; w = w.next {
			if len(w.C) > 0 && now.Sub(w.sent) < hold {
				return
			}
		}
	}
	for w := q.head; w != nil; w = w.next {
		select {
		case w.C <- struct{}{}:
			w.sent = now
			return
		default: // a wake-up is pending already: try the next watcher
		}
	}
}

// WakeAll wakes every watcher that has no wake-up pending: after an event
// may have been missed.
func (q *Queue) WakeAll() {
	now := time.Now()
	for w := q.head; w != nil; w = w.next {
		select {
		case w.C <- struct{}{}:
			w.sent = now
		default:
		}
	}
}
