package live

import (
	"encoding/json"
	"fmt"
	"sync"
)

// Bounds of the event stream.
const (
	maxBacklog = 50_000 // events of one run kept for pages that join late
	clientBuf  = 4096   // events queued for one page before it is dropped
)

// hub fans the events out to every open page, as Server-Sent Events, and
// keeps the current run's for pages that join later.
type hub struct {
	mu      sync.Mutex
	backlog [][]byte
	clients map[chan []byte]bool
	closed  bool
}

// publish sends one event of the given type with v as its data. A page
// too slow to keep up is dropped (its browser reconnects).
func (h *hub) publish(typ string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		data, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	msg := []byte(fmt.Sprintf("event: %s\ndata: %s\n\n", typ, data))
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	if len(h.backlog) < maxBacklog {
		h.backlog = append(h.backlog, msg)
	}
	for c := range h.clients {
		select {
		case c <- msg:
		default:
			h.drop(c)
		}
	}
}

// drop closes a page's channel and forgets it; h.mu is held.
func (h *hub) drop(c chan []byte) {
	delete(h.clients, c)
	close(c)
}

// reset forgets the backlog: a new run starts.
func (h *hub) reset() {
	h.mu.Lock()
	h.backlog = nil
	h.mu.Unlock()
}

// join returns the backlog, the channel of the events after it, and the
// function that leaves.
func (h *hub) join() ([][]byte, <-chan []byte, func()) {
	c := make(chan []byte, clientBuf)
	h.mu.Lock()
	defer h.mu.Unlock()
	backlog := append([][]byte(nil), h.backlog...)
	if h.closed {
		close(c)
		return backlog, c, func() {}
	}
	h.clients[c] = true
	return backlog, c, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.clients[c] {
			h.drop(c)
		}
	}
}

// close ends every stream. It is safe to call more than once.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	for c := range h.clients {
		h.drop(c)
	}
}
