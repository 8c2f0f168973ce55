package mongogate

import (
	"sync"
	"sync/atomic"
)

// docLocks orders writes: a write to named documents waits only for
// writes to the same documents, and an exclusive write waits for, and
// holds off, every other write.
//
// An exclusive write takes all as a writer; a named write takes all as a
// reader, then each of its documents' locks in sorted order, so two
// writes never wait for each other in a cycle. A document's lock lives
// while a write holds it or waits for it. A named write's wait for its
// documents ends early when its client hangs up (lock's gone): it then
// holds nothing, and nothing was forwarded.
type docLocks struct {
	all sync.RWMutex

	mu   sync.Mutex
	docs map[string]*docLock

	// running counts the writes granted and not released; peak is its
	// highest value: for tests, which check that writes overlap.
	running, peak atomic.Int64
}

type docLock struct {
	token chan struct{} // holds one value while a write holds the document
	doc   string        // its key in docLocks.docs
	refs  int           // writes holding or waiting for it
}

// grant is what one write holds; release gives it back. Its methods may
// run on another goroutine than the one that took it.
type grant struct {
	l         *docLocks
	exclusive bool
	held      []*docLock
}

// lock blocks until the write may run: alone when exclusive, otherwise
// with no other write on any of docs (sorted, without repeats). It returns
// nil, holding nothing, if gone is closed before every document is had.
func (l *docLocks) lock(docs []string, exclusive bool, gone <-chan struct{}) *grant {
	if exclusive {
		l.all.Lock()
		l.started()
		return &grant{l: l, exclusive: true}
	}
	l.all.RLock()
	g := &grant{l: l, held: make([]*docLock, len(docs))}
	l.mu.Lock()
	if l.docs == nil {
		l.docs = make(map[string]*docLock)
	}
	for i, d := range docs {
		dl := l.docs[d]
		if dl == nil {
			dl = &docLock{token: make(chan struct{}, 1), doc: d}
			l.docs[d] = dl
		}
		dl.refs++
		g.held[i] = dl
	}
	l.mu.Unlock()
	for i, dl := range g.held {
		select {
		case dl.token <- struct{}{}:
		case <-gone:
			g.drop(i)
			return nil
		}
	}
	l.started()
	return g
}

func (l *docLocks) started() {
	n := l.running.Add(1)
	for p := l.peak.Load(); n > p && !l.peak.CompareAndSwap(p, n); p = l.peak.Load() {
	}
}

// release ends the write.
func (g *grant) release() {
	g.l.running.Add(-1)
	if g.exclusive {
		g.l.all.Unlock()
		return
	}
	g.drop(len(g.held))
}

// drop gives back the first n documents' locks, which g holds, and its
// claim on the rest, which it was waiting for.
func (g *grant) drop(n int) {
	for _, dl := range g.held[:n] {
		<-dl.token
	}
	g.l.mu.Lock()
	for _, dl := range g.held {
		if dl.refs--; dl.refs == 0 {
			delete(g.l.docs, dl.doc)
		}
	}
	g.l.mu.Unlock()
	g.l.all.RUnlock()
}

// waiting reports how many documents have a write holding or waiting for
// them: for tests, which expect none once the gate is idle.
func (l *docLocks) waiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.docs)
}
