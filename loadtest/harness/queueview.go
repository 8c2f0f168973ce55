package harness

import (
	"context"
	"slices"
	"time"

	"github.com/stocklock/stocklock/pkg/strategy"
)

// QueueSample is what the replicas' metrics said of queued's log and its
// buyers at one scrape (services/stock/server's stock_queued_*).
type QueueSample struct {
	// Depth is the sales in the log that no consumer has acknowledged,
	// as the NATS server counts them; -1 when no replica could read it.
	Depth int64 `json:"depth"`
	// Waiting is the buyers waiting for their answer, every replica's;
	// OldestWaitMs the longest wait so far among them, each by its own
	// replica's clock.
	Waiting      int     `json:"waiting"`
	OldestWaitMs float64 `json:"oldest_wait_ms"`
}

// parseQueue reads queued's gauges from a Prometheus text exposition into
// s, adding this replica's buyers to those already in s; false when the
// replica does not export them (it does not serve queued).
func parseQueue(text []byte, s *QueueSample) bool {
	fams := families(text)
	waiting, ok := fams["stock_queued_waiting_buyers"]
	if !ok {
		return false
	}
	for _, m := range waiting.GetMetric() {
		s.Waiting += int(m.GetGauge().GetValue())
	}
	for _, m := range fams["stock_queued_oldest_wait_seconds"].GetMetric() {
		s.OldestWaitMs = max(s.OldestWaitMs, m.GetGauge().GetValue()*1000)
	}
	for _, m := range fams["stock_queued_log_sales"].GetMetric() {
		s.Depth = max(s.Depth, int64(m.GetGauge().GetValue()))
	}
	return true
}

// watchQueued samples queued's log and waiting buyers for the run of name
// (writers are the strategies that sell in it) until the returned
// function is called, which takes a last sample; it does nothing without
// WithViews or when queued does not sell in the run.
func (h *Harness) watchQueued(ctx context.Context, name string, writers []string) func() {
	if !h.views || !slices.Contains(writers, strategy.Queued) {
		return func() {}
	}
	run := h.runNo
	sample := func(bool) {
		s, seen := QueueSample{Depth: -1}, false
		for _, base := range h.replicas {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			text, err := h.api.At(base).Metrics(cctx)
			cancel()
			if err != nil {
				continue // a replica killed or cut off: the others tell
			}
			seen = parseQueue(text, &s) || seen
		}
		if seen {
			h.emit(Event{Type: EventQueue, Run: run, Strategy: name, Queue: &s})
		}
	}
	sample(false)
	return ticking(progressGap, sample)
}
