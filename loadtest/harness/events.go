package harness

import (
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
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

// Sink receives the harness's events. It is called from several
// goroutines at once and must not block for long: the attack waits.
type Sink func(Event)

// The types of Event.
const (
	EventLog      = "log"       // Text: a progress line for people
	EventSetup    = "setup"     // Replicas: the replicas' ids, in order
	EventRunStart = "run-start" // Run, Strategy, SKUs, Initial, Replicas
	EventProgress = "progress"  // Run, Strategy, Progress (about four a second)
	EventGrant    = "grant"     // Run, Strategy, SKU, Replica, Fence: the first sale under a new fencing token
	EventRefused  = "refused"   // Run, Strategy, SKU, Replica, Text: a write the fence or the lease check refused
	EventFault    = "fault"     // Run, Strategy, Fault, Replica (the victim, if any), Shape, Until, Text: a fault struck
	EventRunEnd   = "run-end"   // Run, Strategy, Result: the run's final numbers and verdict
	// With WithViews, while redis-stock sells (about four a second):
	EventRedisStock = "redis-stock" // Run, Strategy, SKU, Redis: what Redis and the MongoDB item hold for the sku
	EventReload     = "reload"      // Run, Strategy, SKU (when the run has one), Replica, Reason, Count, Since: redis-stock reloaded Redis between Since and At
	// With WithViews, while queued sells (about four a second):
	EventQueue = "queue" // Run, Strategy, Queue: queued's log and the buyers waiting for answers
	// The checkout scenario's holds (loadtest checkout), at the moment the
	// harness learned of each:
	EventHeld        = "held"         // Run, Strategy, SKU, Replica, Hold: a hold created
	EventConfirmed   = "confirmed"    // Run, Strategy, SKU, Replica, Hold: its confirm sold
	EventExpired     = "expired"      // Run, Strategy, SKU, Hold, Text: a read said it expired ("read"), or its unit sold again ("sold again")
	EventLateRefused = "late-refused" // Run, Strategy, SKU, Replica, Hold, Text: a confirm refused, the hold expired by the store's clock
)

// Event is one thing that happened during a harness run. Only the fields
// its Type names are set.
type Event struct {
	Type     string      `json:"type"`
	At       time.Time   `json:"at"`
	Run      int         `json:"run,omitempty"`
	Strategy string      `json:"strategy,omitempty"`
	SKU      string      `json:"sku,omitempty"`
	SKUs     []string    `json:"skus,omitempty"`
	Replica  string      `json:"replica,omitempty"`
	Replicas []string    `json:"replicas,omitempty"`
	Fence    int64       `json:"fence,omitempty"`
	Hold     string      `json:"hold,omitempty"` // a hold's id
	Initial  int         `json:"initial,omitempty"`
	Text     string      `json:"text,omitempty"`
	Progress *Progress   `json:"progress,omitempty"`
	Result   *report.Run `json:"result,omitempty"`

	// Fault is the catalogue's name of a fault (drill.Catalogue), Shape
	// its size beyond its victim and span ("350±150 ms"), and Until when
	// it was over; zero Until: it had no end within the attack (a killed
	// replica is started again only after it).
	Fault string    `json:"fault,omitempty"`
	Shape string    `json:"shape,omitempty"`
	Until time.Time `json:"until,omitzero"`

	// Redis is redis-stock's copy of a sku's stock and the item's stock;
	// Reason and Count say why a replica reloaded that copy, and how many
	// times between Since, the previous sample of that replica, and At
	// (mongostore.RedisStockReloadReasons).
	Redis  *RedisStockSample `json:"redis,omitempty"`
	Reason string            `json:"reason,omitempty"`
	Count  int               `json:"count,omitempty"`
	Since  time.Time         `json:"since,omitzero"`
	Queue  *QueueSample      `json:"queue,omitempty"` // queued's log and waiting buyers (EventQueue)
	Bin    *AnswerBin        `json:"bin,omitempty"`   // a flash sale's answers in one bin (EventAnswers, in flash.go)
}

// RedisStockSample is what one replica's metrics said about a sku held by
// redis-stock, read from Redis and then MongoDB when they were scraped.
type RedisStockSample struct {
	Epoch int64 `json:"epoch"` // the copy's epoch; 0: Redis holds none
	Stock int64 `json:"stock"` // units the copy in Redis can still sell
	// Unwritten are the units taken in Redis and not yet written to the
	// MongoDB item and ledger (the ledger's lag); AgeMs the age of the
	// oldest of their sales, by the Redis server's clock.
	Unwritten int64   `json:"unwritten"`
	AgeMs     float64 `json:"age_ms"`
	Item      *int64  `json:"item,omitempty"` // the MongoDB item's stock; nil when not read
}

// Progress is a run's state while its attack goes on.
type Progress struct {
	Elapsed  float64 `json:"elapsed"` // seconds since the attack started
	Sent     int64   `json:"sent"`
	Answered int64   `json:"answered"`
	// Sold counts the units of the sales acknowledged so far; Remaining is
	// the initial stock less them, and Oversold the units acknowledged
	// beyond the initial stock: a unit sold twice, visible as it happens.
	Sold      int64            `json:"sold"`
	Remaining int64            `json:"remaining"`
	Oversold  int64            `json:"oversold"`
	ByReplica map[string]int64 `json:"by_replica"` // units sold, by replica id
	Answers   map[string]int64 `json:"answers"`    // answers by kind: sold, sold out, 503 fenced, no answer: timeout, ...
	Latency   report.Latency   `json:"latency"`    // milliseconds, over the answers so far
	// Sales are the sales acknowledged since the previous progress event
	// (the most recent ones when there were very many).
	Sales []Mark `json:"sales,omitempty"`
	Final bool   `json:"final,omitempty"` // the attack is over
}

// Mark is one acknowledged sale.
type Mark struct {
	At      time.Time `json:"at"`
	Replica string    `json:"replica"`
	SKU     string    `json:"sku"`
	Fence   int64     `json:"fence,omitempty"`
}

// Terminal returns a Sink that renders the events for a person at a
// terminal (or reading a log file): every log line, and a progress line
// per run, redrawn in place on a terminal and printed every few seconds
// elsewhere; quiet leaves the progress line out.
func Terminal(w io.Writer, quiet bool) Sink {
	t := &terminal{w: w, quiet: quiet}
	if f, ok := w.(*os.File); ok {
		st, err := f.Stat()
		t.tty = err == nil && st.Mode()&os.ModeCharDevice != 0
	}
	return t.event
}

type terminal struct {
	mu        sync.Mutex
	w         io.Writer
	tty       bool
	quiet     bool
	lastPrint time.Time
	open      bool // a progress line is drawn and not yet ended
}

func (t *terminal) event(ev Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case ev.Type == EventLog:
		t.endLine()
		fmt.Fprintln(t.w, ev.Text)
	case ev.Type == EventProgress && !t.quiet:
		t.progress(ev.Strategy, ev.Progress)
	}
}

func (t *terminal) progress(strategy string, p *Progress) {
	rate := 0.0
	if p.Elapsed > 0 {
		rate = float64(p.Sent) / p.Elapsed
	}
	var unavailable, errs int64
	for kind, n := range p.Answers {
		switch {
		case kind == "sold" || kind == "sold out":
		case len(kind) > 3 && kind[:3] == "503":
			unavailable += n
		default:
			errs += n
		}
	}
	line := fmt.Sprintf("  %-11s %5.1fs  sent %6d (%6.1f/s)  answered %6d  sold %6d  sold out %6d  503 %5d  errors %4d",
		strategy, p.Elapsed, p.Sent, rate, p.Answered, p.Sold, p.Answers["sold out"], unavailable, errs)
	switch {
	case t.tty:
		fmt.Fprintf(t.w, "\r%s\x1b[K", line)
		t.open = true
		if p.Final {
			t.endLine()
		}
	case p.Final || time.Since(t.lastPrint) >= 2*time.Second:
		t.lastPrint = time.Now()
		fmt.Fprintln(t.w, line)
	}
}

// endLine ends a progress line drawn in place, so that the next line does
// not overwrite it.
func (t *terminal) endLine() {
	if t.open {
		fmt.Fprintln(t.w)
		t.open = false
	}
}

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
