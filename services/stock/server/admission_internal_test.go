package server

import (
	"context"
	"sync"
	"testing"
	"time"
)

// fakeClock is an admission's clock that moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// result is what one acquire ended with.
type result struct {
	release func()
	reason  string
}

// waitFor starts acquire in a goroutine and waits until it is queued.
func waitFor(t *testing.T, a *admission, ctx context.Context, queued int) <-chan result {
	t.Helper()
	out := make(chan result, 1)
	go func() {
		r, reason := a.acquire(ctx)
		out <- result{r, reason}
	}()
	for {
		if _, w := a.counts(); w == queued {
			return out
		}
		time.Sleep(time.Millisecond)
	}
}

// wantShedAfterTarget fails t unless the waiter of got, described by
// what, is shed for its wait (a timer of the target's, not the age
// limit's hour) within 30 s.
func wantShedAfterTarget(t *testing.T, got <-chan result, what string) {
	t.Helper()
	select {
	case r := <-got:
		if r.release != nil || r.reason != shedQueueWait {
			t.Fatalf("%s: admitted %v, reason %q; want %s", what, r.release != nil, r.reason, shedQueueWait)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s still waits after 30 s; want it shed after the target", what)
	}
}

// TestAdmission: a bound of working requests, a bounded queue, and every
// way out of it: a slot handed over, a full queue, a client gone, the age
// limit, and a standing queue served newest first with its old waiters
// dropped.
func TestAdmission(t *testing.T) {
	var shed []string
	var mu sync.Mutex
	count := func(reason string) { mu.Lock(); shed = append(shed, reason); mu.Unlock() }

	t.Run("handover, full queue, client gone", func(t *testing.T) {
		a := newAdmission(1, 1, time.Hour, count)
		first, reason := a.acquire(t.Context())
		if first == nil {
			t.Fatalf("the first request was shed: %s", reason)
		}
		ctx, cancel := context.WithCancel(t.Context())
		gone := waitFor(t, a, ctx, 1)
		if r, reason := a.acquire(t.Context()); r != nil || reason != shedQueueFull {
			t.Fatalf("a request past a full queue: admitted %v, reason %q; want %s", r != nil, reason, shedQueueFull)
		}
		cancel()
		if r := <-gone; r.release != nil || r.reason != shedClientGone {
			t.Fatalf("a waiter whose client left: admitted %v, reason %q; want %s", r.release != nil, r.reason, shedClientGone)
		}
		next := waitFor(t, a, t.Context(), 1)
		first()
		r := <-next
		if r.release == nil {
			t.Fatalf("the waiter was not handed the freed slot: %s", r.reason)
		}
		if w, q := a.counts(); w != 1 || q != 0 {
			t.Fatalf("after the handover: %d working, %d waiting; want 1, 0", w, q)
		}
		r.release()
		if w, _ := a.counts(); w != 0 {
			t.Fatalf("after every release: %d working", w)
		}
	})

	t.Run("age limit", func(t *testing.T) {
		a := newAdmission(1, 1, 20*time.Millisecond, count)
		first, _ := a.acquire(t.Context())
		late := waitFor(t, a, t.Context(), 1)
		if r := <-late; r.release != nil || r.reason != shedQueueWait {
			t.Fatalf("a waiter past the age limit: admitted %v, reason %q; want %s", r.release != nil, r.reason, shedQueueWait)
		}
		first()
		if w, q := a.counts(); w != 0 || q != 0 {
			t.Fatalf("%d working, %d waiting; want none", w, q)
		}
	})

	t.Run("standing queue: newest first, old waiters dropped", func(t *testing.T) {
		clock := &fakeClock{t: time.Unix(1e9, 0)}
		a := newAdmission(1, 3, time.Hour, count) // no timer fires; the fake clock decides
		a.now, a.target = clock.now, time.Minute  // the young waiter waits for the release, however slow the machine
		first, _ := a.acquire(t.Context())
		old := waitFor(t, a, t.Context(), 1)
		clock.add(time.Hour) // the queue has not been empty for a whole maxWait
		young := waitFor(t, a, t.Context(), 2)
		first()
		if r := <-old; r.release != nil || r.reason != shedQueueWait {
			t.Fatalf("the old waiter of a standing queue: admitted %v, reason %q; want %s", r.release != nil, r.reason, shedQueueWait)
		}
		r := <-young
		if r.release == nil {
			t.Fatalf("the newest waiter of a standing queue was shed: %s", r.reason)
		}
		r.release()
	})

	t.Run("standing queue: a new waiter waits the target, not the age limit", func(t *testing.T) {
		clock := &fakeClock{t: time.Unix(1e9, 0)}
		a := newAdmission(1, 3, time.Hour, count)
		a.now, a.target = clock.now, 10*time.Millisecond
		first, _ := a.acquire(t.Context())
		old := waitFor(t, a, t.Context(), 1)
		clock.add(a.interval) // the queue stands
		young := waitFor(t, a, t.Context(), 2)
		wantShedAfterTarget(t, young, "a waiter that joined a standing queue")
		select {
		case r := <-old:
			t.Fatalf("the waiter that joined before the queue stood left early: %+v", r)
		default:
		}
		clock.add(time.Hour)
		first()
		if r := <-old; r.release != nil {
			t.Fatal("the old waiter of a standing queue was served")
		}

		// That release emptied the queue by dropping its old waiter: it
		// still stands for an interval, and the next waiter waits the
		// target, not the age limit.
		again, _ := a.acquire(t.Context())
		defer again()
		next := waitFor(t, a, t.Context(), 1)
		wantShedAfterTarget(t, next, "a waiter of a queue emptied by a standing queue's drops")
	})

	t.Run("a waiter that waited in vain keeps the queue standing", func(t *testing.T) {
		clock := &fakeClock{t: time.Unix(1e9, 0)}
		a := newAdmission(1, 3, 20*time.Millisecond, count) // an age limit short enough to wait out
		a.now, a.target = clock.now, 20*time.Millisecond
		first, _ := a.acquire(t.Context())
		defer first()
		if r := <-waitFor(t, a, t.Context(), 1); r.release != nil || r.reason != shedQueueWait {
			t.Fatalf("a waiter past the age limit: admitted %v, reason %q", r.release != nil, r.reason)
		}
		a.maxWait = time.Hour // were the queue to drain, the next waiter would wait an hour
		next := waitFor(t, a, t.Context(), 1)
		wantShedAfterTarget(t, next, "the waiter after one that waited in vain")
	})

	t.Run("no longer a queue than the slots serve within the wait", func(t *testing.T) {
		clock := &fakeClock{t: time.Unix(1e9, 0)}
		a := newAdmission(1, 10, 2*time.Hour, nil) // room for 10 waiters, each waiting up to 2 h
		a.now = clock.now
		first, _ := a.acquire(t.Context())
		clock.add(time.Hour)
		first() // a slot is held an hour: two waiters are all it serves within 2 h
		held, _ := a.acquire(t.Context())
		defer held()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		waitFor(t, a, ctx, 1)
		waitFor(t, a, ctx, 2)
		third, stop := context.WithTimeout(t.Context(), 5*time.Second) // queued, it would wait 2 h
		defer stop()
		if r, reason := a.acquire(third); r != nil || reason != shedQueueFull {
			t.Fatalf("a third waiter for a slot held an hour, waiting at most 2 h: admitted %v, reason %q; want %s at once", r != nil, reason, shedQueueFull)
		}
	})

	mu.Lock()
	defer mu.Unlock()
	want := []string{shedQueueFull, shedClientGone, shedQueueWait, shedQueueWait, shedQueueWait, shedQueueWait, shedQueueWait, shedQueueWait, shedQueueWait}
	if len(shed) != len(want) {
		t.Fatalf("shed counted %v; want %v", shed, want)
	}
	for i := range want {
		if shed[i] != want[i] {
			t.Fatalf("shed counted %v; want %v", shed, want)
		}
	}
}

// BenchmarkAdmissionShed: the cost of shedding a request when every slot
// and place in the queue is taken, from many goroutines at once (the
// herd): no store, no lock, no wait.
func BenchmarkAdmissionShed(b *testing.B) {
	a := newAdmission(1, 0, time.Second, func(string) {})
	held, _ := a.acquire(b.Context())
	defer held()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if r, _ := a.acquire(context.Background()); r != nil {
				b.Fatal("admitted past the bound")
			}
		}
	})
}
