package mongolock

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestAttemptsTakeTurns(t *testing.T) {
	var a attempts
	ctx := t.Context()

	_, doneA, err := a.wait(ctx, "k", "a")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		taken bool
		done  func(bool)
	}
	queued := func(owner string) chan result {
		ch := make(chan result, 1)
		go func() {
			taken, done, err := a.wait(ctx, "k", owner)
			if err != nil {
				t.Error(err)
			}
			ch <- result{taken, done}
		}()
		return ch
	}
	b := queued("b")
	select {
	case <-b:
		t.Fatal("a second attempt on the key started while the first was in flight")
	case <-time.After(20 * time.Millisecond):
	}
	// Another key is not held up.
	if _, doneX, err := a.wait(ctx, "x", "b"); err != nil {
		t.Fatal(err)
	} else {
		doneX(false)
	}

	doneA(true) // a was granted the key while b waited
	rb := <-b
	if !rb.taken {
		t.Error("b waited while a was granted the key, but was not told")
	}
	rb.done(false)

	// The same owner is never told that it lost to itself.
	_, doneA, _ = a.wait(ctx, "k", "a")
	a2 := queued("a")
	time.Sleep(10 * time.Millisecond)
	doneA(true)
	if r := <-a2; r.taken {
		t.Error("a was told another owner took the key when it was a itself")
	} else {
		r.done(false)
	}

	// A failed attempt tells the next in line nothing.
	_, doneA, _ = a.wait(ctx, "k", "a")
	c := queued("c")
	time.Sleep(10 * time.Millisecond)
	doneA(false)
	if r := <-c; r.taken {
		t.Error("c was told the key was taken after a failed attempt")
	} else {
		r.done(false)
	}

	if len(a.keys) != 0 {
		t.Errorf("%d keys left in the table after every attempt finished", len(a.keys))
	}
}

func TestAttemptsWaitEndsWithContext(t *testing.T) {
	var a attempts
	_, done, err := a.wait(t.Context(), "k", "a")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, _, err := a.wait(ctx, "k", "b"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("wait past its deadline = %v, want DeadlineExceeded", err)
	}
	done(false)
	if len(a.keys) != 0 {
		t.Errorf("%d keys left in the table after a cancelled wait", len(a.keys))
	}
}
