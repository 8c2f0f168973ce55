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
// reader, then each of its documents' mutexes in sorted order, so two
// writes never wait for each other in a cycle. A document's mutex lives
// while a write holds it or waits for it.
type docLocks struct {
	all sync.RWMutex

	mu   sync.Mutex
	docs map[string]*docLock

	// running counts the writes granted and not released; peak is its
	// highest value: for tests, which check that writes overlap.
	running, peak atomic.Int64
}

type docLock struct {
	sync.Mutex
	doc  string // its key in docLocks.docs
	refs int    // writes holding or waiting for it
}

// grant is what one write holds; release gives it back. Its methods may
// run on another goroutine than the one that took it.
type grant struct {
	l         *docLocks
	exclusive bool
	held      []*docLock
}

// lock blocks until the write may run: alone when exclusive, otherwise
// with no other write on any of docs (sorted, without repeats).
func (l *docLocks) lock(docs []string, exclusive bool) *grant {
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
			dl = &docLock{doc: d}
			l.docs[d] = dl
		}
		dl.refs++
		g.held[i] = dl
	}
	l.mu.Unlock()
	for _, dl := range g.held {
		dl.Lock()
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
	for _, dl := range g.held {
		dl.Unlock()
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
