package harness

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/stocklock/stocklock/loadtest/attack"
	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/loadtest/verdict"
	"github.com/stocklock/stocklock/pkg/stockclient"
)

// Bounds of what a tracker keeps between progress events.
const (
	maxMarks    = 400    // sales per progress event
	maxLatency  = 10_000 // latencies sampled for the live percentiles
	progressGap = 250 * time.Millisecond
)

// tracker follows one run's answers as they arrive, for the progress
// events: what the terminal's progress line and the live page show.
type tracker struct {
	h        *Harness
	run      int
	strategy string
	initial  int64
	sent     *atomic.Int64 // the attack's requests sent
	started  time.Time

	mu        sync.Mutex
	byReplica map[string]int64 // units sold; they add up to the run's
	answers   map[string]int64 // they add up to the answers so far
	lat       []float64        // a uniform sample of the latencies, ms
	latSeen   int
	marks     []Mark
	fences    map[skuFence]bool // the tokens seen
}

type skuFence struct {
	sku   string
	fence int64
}

// track follows run's answers, which classify hands it, and sends a
// progress event every progressGap until stop, which sends the final one.
func (h *Harness) track(run *report.Run, a *attack.Attack) (t *tracker, stop func()) {
	t = &tracker{
		h: h, run: h.runNo, strategy: run.Strategy, initial: int64(run.Stock * len(run.SKUs)),
		sent: &a.Sent, started: a.Started,
		byReplica: map[string]int64{}, answers: map[string]int64{}, fences: map[skuFence]bool{},
	}
	return t, ticking(progressGap, func(final bool) {
		h.emit(Event{Type: EventProgress, Run: t.run, Strategy: t.strategy, Progress: t.progress(final)})
	})
}

// answer notes one classified answer: a sale's replica and token (a new
// token is a grant event), a refusal by the fence or the lease check (an
// event), and its latency.
func (t *tracker) answer(r *vegeta.Result, cls verdict.Class, o verdict.Order, note string) {
	var grant bool
	t.mu.Lock()
	t.answers[answerKind(cls, note)]++
	t.latSeen++
	ms := float64(r.Latency) / float64(time.Millisecond)
	if len(t.lat) < maxLatency {
		t.lat = append(t.lat, ms)
	} else if i := rand.IntN(t.latSeen); i < maxLatency {
		t.lat[i] = ms
	}
	if cls == verdict.Sold {
		t.byReplica[o.Replica] += int64(o.Qty)
		if len(t.marks) >= maxMarks {
			t.marks = t.marks[1:]
		}
		t.marks = append(t.marks, Mark{At: r.End(), Replica: o.Replica, SKU: o.SKU, Fence: o.Fence})
		if k := (skuFence{o.SKU, o.Fence}); o.Fence != 0 && !t.fences[k] {
			grant, t.fences[k] = true, true
		}
	}
	t.mu.Unlock()
	switch {
	case grant:
		t.h.emit(Event{Type: EventGrant, At: r.Timestamp, Run: t.run, Strategy: t.strategy, SKU: o.SKU, Replica: o.Replica, Fence: o.Fence})
	case cls == verdict.Unavailable && slices.ContainsFunc(refusals, func(code string) bool { return strings.HasSuffix(note, code) }):
		replica := "" // none when it went through the cutting proxy
		for base, id := range t.h.ids {
			if strings.HasPrefix(r.URL, base+"/") {
				replica = id
			}
		}
		t.h.emit(Event{Type: EventRefused, At: r.End(), Run: t.run, Strategy: t.strategy, SKU: stockclient.SKUOfURL(r.URL), Replica: replica, Text: note})
	}
}

// answerKind is an answer's kind in the tallies: sold, sold out, a
// transport error's kind, or else its note ("503 fenced").
func answerKind(cls verdict.Class, note string) string {
	switch cls {
	case verdict.Sold, verdict.SoldOut:
		return string(cls)
	case verdict.Transport:
		return attack.TransportKind(note)
	}
	return note
}

// refusals end the 503 notes of a write the fence, the version check or
// the lease check refused.
var refusals = []string{" fenced", " lease_lost", " stale_read"}

// progress is the run's state now, with the sales marked since the last call.
func (t *tracker) progress(final bool) *Progress {
	p := &Progress{Elapsed: time.Since(t.started).Seconds(), Sent: t.sent.Load(), Final: final}
	t.mu.Lock()
	p.ByReplica, p.Answers = maps.Clone(t.byReplica), maps.Clone(t.answers)
	p.Sales, t.marks = t.marks, nil
	lat := slices.Clone(t.lat)
	t.mu.Unlock()
	for _, n := range p.Answers {
		p.Answered += n
	}
	for _, n := range p.ByReplica {
		p.Sold += n
	}
	p.Remaining, p.Oversold = t.initial-p.Sold, max(0, p.Sold-t.initial)
	slices.Sort(lat)
	q := func(f float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(f*float64(len(lat))))]
	}
	p.Latency = report.Latency{P50: q(0.50), P95: q(0.95), P99: q(0.99), Max: q(1)}
	return p
}

// ticking calls f(false) every gap, in a goroutine of its own, until the
// returned function is first called, which calls f(true) and waits for it.
func ticking(gap time.Duration, f func(final bool)) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(gap)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				f(true)
				return
			case <-tick.C:
				f(false)
			}
		}
	}()
	return sync.OnceFunc(func() {
		close(quit)
		<-done
	})
}
