// Package history records what every client of a load-test run asked and
// saw, writes it as JSON lines, and checks it for linearizability against a
// model of one inventory item, SKU by SKU, with porcupine.
//
// A history is a list of Op. Times are nanoseconds on the monotonic clock
// since the recorder's start: Call is taken just before the request is
// handed to the HTTP transport, Return just after the last byte of the
// answer was read (or the client gave up), so the interval [Call, Return]
// contains every moment at which the service can have acted on the request.
package history

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stocklock/stocklock/pkg/stockclient"
)

// Kind is what an operation did.
type Kind string

const (
	// Set is the PUT that resets an item's stock before a run.
	Set Kind = "set"
	// Decrement is a POST .../decrement.
	Decrement Kind = "decrement"
	// Read is a GET of the item: the stock it returned.
	Read Kind = "read"
)

// Outcome is what an operation's answer promises about its effect.
type Outcome string

const (
	// OK is a set or read that was answered with 2xx.
	OK Outcome = "ok"
	// Sold is a 200 to a decrement: it took Qty units, leaving Remaining.
	Sold Outcome = "sold"
	// SoldOut is a 409 sold_out: the stock could not cover Qty; nothing
	// changed.
	SoldOut Outcome = "sold_out"
	// Refused is an answer that promises nothing changed: a 4xx other than
	// sold_out, a 503 whose code the contract says changed nothing
	// (stockclient's Again and Stop: lock_unavailable, overloaded,
	// strategy_unavailable, ...), or a connection refused
	// before the request was sent. The checker drops these.
	Refused Outcome = "refused"
	// Unknown is an operation whose effect the client cannot know: a
	// client timeout, a cut connection, 500 outcome_unknown or any other
	// 5xx. It may take effect at any time after its call, or never.
	Unknown Outcome = "unknown"
)

// Classify maps an answer to a decrement to its Outcome: status 0 means no
// HTTP answer arrived, and refusedConn that the connection was refused (the
// request never reached a replica).
func Classify(status int, errCode string, refusedConn bool) Outcome {
	switch {
	case status == 0 && refusedConn:
		return Refused
	case status == 0:
		return Unknown
	case status == 200:
		return Sold
	case status == 409 && errCode == "sold_out":
		return SoldOut
	case status >= 400 && status < 500:
		return Refused
	case status == 503 && stockclient.RuleOf(&stockclient.Error{Status: status, Code: errCode}) != stockclient.IfIdempotent:
		// A 503 of the contract leaves the outcome unknown only where its
		// rule is IfIdempotent; Again and Stop say nothing changed.
		return Refused
	default:
		return Unknown
	}
}

// Op is one operation of a history, one JSON line in the file.
type Op struct {
	Client   int     `json:"client"`
	Kind     Kind    `json:"op"`
	SKU      string  `json:"sku"`
	Qty      int     `json:"qty,omitempty"`
	Strategy string  `json:"strategy,omitempty"`
	Key      string  `json:"key,omitempty"` // the Idempotency-Key header, if sent
	Attempt  int     `json:"attempt,omitempty"`
	Target   string  `json:"target,omitempty"`  // base URL the request went to
	Replica  string  `json:"replica,omitempty"` // replica id in the answer
	Call     int64   `json:"call_ns"`
	Return   int64   `json:"return_ns"`
	Outcome  Outcome `json:"outcome"`
	// Remaining is the stock a sale left, as the replica returned it.
	Remaining *int `json:"remaining,omitempty"`
	// Stock is the stock a read returned or a set wrote.
	Stock   *int   `json:"stock,omitempty"`
	OrderID string `json:"order_id,omitempty"`
	Status  int    `json:"status,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Int returns a pointer to n, for Op.Remaining and Op.Stock.
func Int(n int) *int { return &n }

// Recorder collects the operations of one run from many goroutines. Its
// client ids are slots: an operation takes the lowest free one for its
// duration, so that no two operations of one client overlap, as a
// linearizability history requires of a client.
type Recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []Op
	busy  []bool
}

// NewRecorder returns a recorder whose times count from start, which must
// carry a monotonic clock reading (time.Now does).
func NewRecorder(start time.Time) *Recorder { return &Recorder{start: start} }

// Now is the time since the recorder's start, in nanoseconds.
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// Acquire returns the lowest free client id; Release frees it.
func (r *Recorder) Acquire() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := slices.Index(r.busy, false)
	if i < 0 {
		i, r.busy = len(r.busy), append(r.busy, false)
	}
	r.busy[i] = true
	return i
}

// Release frees a client id taken with Acquire.
func (r *Recorder) Release(id int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id >= 0 && id < len(r.busy) {
		r.busy[id] = false
	}
}

// Add records one finished operation.
func (r *Recorder) Add(op Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, op)
}

// Ops returns the operations recorded so far, ordered by call time.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	out := slices.Clone(r.ops)
	r.mu.Unlock()
	slices.SortStableFunc(out, func(a, b Op) int { return cmp.Compare(a.Call, b.Call) })
	return out
}

// WriteJSONL writes ops as JSON lines.
func WriteJSONL(w io.Writer, ops []Op) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for _, op := range ops {
		if err := enc.Encode(op); err != nil {
			return fmt.Errorf("encode op: %w", err)
		}
	}
	return bw.Flush()
}

// ReadJSONL reads a history written by WriteJSONL. Blank lines are skipped.
func ReadJSONL(r io.Reader) ([]Op, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var ops []Op
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var op Op
		if err := cmp.Or(json.Unmarshal([]byte(line), &op), op.validate()); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		ops = append(ops, op)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	return ops, nil
}

func (op *Op) validate() error { // a pointer: ReadJSONL calls it in one expression after Unmarshal fills op
	switch {
	case op.SKU == "":
		return fmt.Errorf("no sku")
	case op.Return < op.Call:
		return fmt.Errorf("return_ns %d before call_ns %d", op.Return, op.Call)
	case op.Kind == Set && op.Stock == nil, op.Kind == Read && op.Outcome == OK && op.Stock == nil:
		return fmt.Errorf("%s without stock", op.Kind)
	case op.Kind == Decrement && op.Outcome == Sold && op.Remaining == nil:
		return fmt.Errorf("sale without remaining")
	case op.Kind == Decrement && op.Qty < 1:
		return fmt.Errorf("decrement of qty %d", op.Qty)
	case op.Kind != Set && op.Kind != Read && op.Kind != Decrement:
		return fmt.Errorf("unknown op %q", op.Kind)
	}
	return nil
}

// WriteSVG draws the operations of one sku as a timeline: one lane per
// client, each operation a bar from its call to its return, labelled with
// what it asked and was told. An unknown outcome's bar runs on, dashed, to
// the end: it may take effect any time after its call.
func WriteSVG(w io.Writer, ops []Op, sku string) error {
	var mine []Op
	var end int64
	var clients []int
	for _, op := range ops {
		if op.SKU == sku {
			mine = append(mine, op)
			clients = append(clients, op.Client)
			end = max(end, op.Return)
		}
	}
	slices.Sort(clients)
	clients = slices.Compact(clients)
	const left, width, lane, top = 90.0, 900.0, 46.0, 30.0
	x := func(t int64) float64 { return left + width*float64(t)/float64(max(end, 1)) }
	laneY := func(client int) float64 {
		i, _ := slices.BinarySearch(clients, client)
		return top + lane*float64(i)
	}
	var b strings.Builder
	h := top + lane*float64(len(clients)) + 30
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", left+width+20, h)
	fmt.Fprintf(&b, `<text x="%.0f" y="18" font-size="13">history of %s: bars from call to return; time →</text>`+"\n", left, html.EscapeString(sku))
	for _, c := range clients {
		fmt.Fprintf(&b, `<text x="8" y="%.1f">client %d</text>`+"\n", laneY(c)+20, c)
	}
	for _, op := range mine {
		y := laneY(op.Client)
		x0, x1 := x(op.Call), x(op.Return)
		dash := ""
		if op.Outcome == Unknown {
			x1, dash = x(end), ` stroke-dasharray="4 3"`
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="16" fill="%s" fill-opacity="0.35" stroke="%s"%s/>`+"\n",
			x0, y+8, max(x1-x0, 2), color(op), color(op), dash)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x0, y+38, html.EscapeString(shortText(op)))
	}
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#999"/>`+"\n", left, h-20, left+width, h-20)
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">0</text><text x="%.0f" y="%.0f" text-anchor="end">%s</text>`+"\n", left, h-6, left+width, h-6, ms(end))
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func color(op Op) string {
	switch {
	case op.Kind == Set:
		return "#333333"
	case op.Kind == Read:
		return "#1f77b4"
	case op.Outcome == Sold:
		return "#2ca02c"
	case op.Outcome == SoldOut:
		return "#7f7f7f"
	case op.Outcome == Unknown:
		return "#ff7f0e"
	}
	return "#cccccc"
}

func shortText(op Op) string {
	switch {
	case op.Kind == Set:
		return fmt.Sprintf("set %d", *op.Stock)
	case op.Kind == Read && op.Stock != nil:
		return fmt.Sprintf("read %d", *op.Stock)
	case op.Outcome == Sold:
		return fmt.Sprintf("sold, %d left (%s)", *op.Remaining, op.Replica)
	case op.Outcome == SoldOut:
		return "sold out"
	}
	return string(op.Outcome)
}
