package mongostore

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// QueueState is what queued's log and this replica's buyers look like at
// one moment: the live page's and the metrics' view of the queue.
type QueueState struct {
	// Depth is the sales in the log that no consumer has acknowledged
	// yet, every partition's, as the broker counts them (the stream's
	// messages: it keeps a sale until its ack). Every replica reads the
	// same.
	Depth uint64
	// Waiting is this replica's buyers waiting for their answer, and
	// OldestWait how long the first of them has waited so far, by this
	// replica's clock: the lag a buyer feels.
	Waiting    int
	OldestWait time.Duration
}

// State reads the depth of the log from the broker and this replica's
// waiting buyers.
func (q *Queued) State(ctx context.Context) (QueueState, error) {
	var st QueueState
	st.Waiting, st.OldestWait = q.waits.oldest(time.Now())
	info, err := q.stream.Info(ctx)
	if err != nil {
		return st, fmt.Errorf("mongostore: queued: the log's depth: %w", err)
	}
	st.Depth = info.State.Msgs
	return st, nil
}

// waits are the buyers waiting for a consumer's answer on this replica,
// by when each began.
type waits struct {
	mu    sync.Mutex
	next  uint64
	since map[uint64]time.Time
}

// begin notes a buyer that starts waiting; the function it returns notes
// that its wait is over.
func (w *waits) begin() (end func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.since == nil {
		w.since = map[uint64]time.Time{}
	}
	id := w.next
	w.next++
	w.since[id] = time.Now()
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.since, id)
	}
}

// oldest returns how many buyers wait, and the longest wait so far at now.
func (w *waits) oldest(now time.Time) (n int, longest time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, at := range w.since {
		longest = max(longest, now.Sub(at))
	}
	return len(w.since), longest
}
