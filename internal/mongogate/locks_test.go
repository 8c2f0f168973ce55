package mongogate

import (
	"testing"
	"time"
)

// acquired runs lock in a goroutine and returns a channel that yields its
// grant once it is had.
func acquired(l *docLocks, docs []string, exclusive bool) chan *grant {
	ch := make(chan *grant, 1)
	go func() { ch <- l.lock(docs, exclusive, nil) }()
	return ch
}

// blocked reports whether ch has not yielded within a short wait; a grant
// it receives goes back into ch for the test to take. A wrong
// "blocked" can only come from a very slow machine, and fails the test
// towards less parallelism, never towards a missed exclusion: the checks
// that a lock is exclusive use it only to see that the grant is not given
// while the holder still holds.
func blocked(ch chan *grant) bool {
	select {
	case g := <-ch:
		ch <- g
		return false
	case <-time.After(50 * time.Millisecond):
		return true
	}
}

func TestDocLocks(t *testing.T) {
	t.Parallel()

	var l docLocks

	a := l.lock([]string{"d\x00c\x00s1"}, false, nil)

	// Another document: granted at once while a1 is held.
	other := acquired(&l, []string{"d\x00c\x00s2"}, false)
	if blocked(other) {
		t.Fatal("a write to another document waited for a write to s1")
	}

	// The same document, also as part of a batch: waits for a.
	same := acquired(&l, []string{"d\x00c\x00s0", "d\x00c\x00s1"}, false)
	if !blocked(same) {
		t.Fatal("a write to s1 was granted while another write to s1 held it")
	}
	// An exclusive write waits for every write.
	excl := acquired(&l, nil, true)
	if !blocked(excl) {
		t.Fatal("an exclusive write was granted while writes held documents")
	}

	a.release()
	g := <-same
	if !blocked(excl) {
		t.Fatal("an exclusive write was granted while a write held s0 and s1")
	}
	g.release()
	(<-other).release()
	e := <-excl

	// While the exclusive write runs, no write is granted.
	after := acquired(&l, []string{"d\x00c\x00s3"}, false)
	if !blocked(after) {
		t.Fatal("a write was granted while an exclusive write ran")
	}
	e.release()
	(<-after).release()

	if n := l.waiting(); n != 0 {
		t.Errorf("%d document locks left after every write released", n)
	}
	if p := l.peak.Load(); p != 2 {
		t.Errorf("peak writes at once = %d, want 2 (s1 and s2)", p)
	}
}

// TestDocLocksGiveUp: a write whose client hangs up while it waits for its
// documents holds none of them afterwards, whether it had some already or
// none, and the documents are free for the next write.
func TestDocLocksGiveUp(t *testing.T) {
	t.Parallel()

	var l docLocks
	s0, s1 := "d\x00c\x00s0", "d\x00c\x00s1"
	a := l.lock([]string{s1}, false, nil)

	// Waits for s1 while holding s0; its client then hangs up.
	gone := make(chan struct{})
	ch := make(chan *grant, 1)
	go func() { ch <- l.lock([]string{s0, s1}, false, gone) }()
	if !blocked(ch) {
		t.Fatal("a write to s1 was granted while another write to s1 held it")
	}
	close(gone)
	if g := <-ch; g != nil {
		t.Fatal("a write whose client hung up while it waited was granted")
	}
	// s0 is free again: a write to it alone is granted while a holds s1.
	if g := acquired(&l, []string{s0}, false); blocked(g) {
		t.Fatal("s0 stayed locked after the write that waited for it gave up")
	} else {
		(<-g).release()
	}
	a.release()
	if n := l.waiting(); n != 0 {
		t.Errorf("%d document locks left after every write released or gave up", n)
	}
	// An exclusive write is granted: nobody holds all as a reader.
	if g := acquired(&l, nil, true); blocked(g) {
		t.Fatal("an exclusive write waited after every write released or gave up")
	} else {
		(<-g).release()
	}
}
