package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/loadtest/verdict"
)

// harness runs the strategies of one Config against a set of replicas.
type harness struct {
	cfg      Config
	replicas []string
	outDir   string
	prefix   string // sku prefix of this harness run
	api      *api
	log      io.Writer // progress and notes (stderr)
	tty      bool      // log is a terminal: redraw the progress line in place
	// probe asks the replicas' /healthz who holds a lock, in fault drills.
	probe *api
	// reader is the separate client whose reads of the stock go into
	// the history.
	reader *api
	// drills numbers the fault runs, so that each gets skus of its own.
	drills int
	// metricsWarned is set once a replica's /metrics could not be read or
	// had no lock wait histogram, so that the note is made only once.
	metricsWarned bool
}

func (h *harness) logf(format string, a ...any) {
	fmt.Fprintf(h.log, format+"\n", a...)
}

// skus returns the skus of strategy's run; drill > 0 numbers a fault run,
// which gets skus of its own (a strategy runs under several faults).
func (h *harness) skus(strategy string, drill int) []string {
	out := make([]string, h.cfg.SKUs)
	for i := range out {
		if drill > 0 {
			out[i] = fmt.Sprintf("%s-%s-f%d-%d", h.prefix, strategy, drill, i)
		} else {
			out[i] = fmt.Sprintf("%s-%s-%d", h.prefix, strategy, i)
		}
	}
	return out
}

// tally counts a run's responses as they arrive; the progress line reads
// it from another goroutine.
type tally struct {
	sent, done, orders, units, soldOut, unavailable, other, transport atomic.Int64
}

// response is what the harness needs from a decrement answer's body.
type response struct {
	OrderID string `json:"order_id"`
	SKU     string `json:"sku"`
	Qty     int    `json:"qty"`
	Replica string `json:"replica"`
	Fence   int64  `json:"fence"`
	Error   string `json:"error"`
}

// skuOfURL extracts the sku from .../v1/items/<sku>/decrement.
func skuOfURL(u string) string {
	const marker = "/v1/items/"
	i := strings.Index(u, marker)
	if i < 0 {
		return ""
	}
	rest := u[i+len(marker):]
	if j := strings.IndexByte(rest, '/'); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// interpret classifies one Vegeta result and, for a sale, returns its order.
func interpret(r *vegeta.Result, qty int) (verdict.Class, verdict.Order, string) {
	var body response
	if r.Code != 0 && len(r.Body) > 0 {
		_ = json.Unmarshal(r.Body, &body)
	}
	cls := verdict.Classify(int(r.Code), body.Error)
	if cls != verdict.Sold {
		note := r.Error
		if r.Code != 0 {
			note = fmt.Sprintf("%d %s", r.Code, body.Error)
			if body.Error == "" {
				note = fmt.Sprintf("%d %s", r.Code, strings.TrimSpace(firstN(string(r.Body), 120)))
			}
		}
		return cls, verdict.Order{}, note
	}
	o := verdict.Order{ID: body.OrderID, SKU: body.SKU, Qty: body.Qty, Replica: body.Replica, Fence: body.Fence}
	if o.SKU == "" {
		o.SKU = skuOfURL(r.URL)
	}
	if o.Qty == 0 {
		o.Qty = qty
	}
	return cls, o, ""
}

func firstN(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// classLabel names a result's class in the Vegeta plot.
func classLabel(r *vegeta.Result) string {
	cls, _, _ := interpret(r, 1)
	return cls.String()
}

// ctxTransport ties every attack request to the harness's context, so
// that Ctrl-C also abandons the requests in flight instead of waiting for
// their timeout.
type ctxTransport struct {
	ctx  context.Context
	base http.RoundTripper
}

func (t ctxTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.base.RoundTrip(req.WithContext(t.ctx))
}

// newAttacker returns a fresh Attacker (an Attacker is single-use) with
// workers initial and at most maxWorkers concurrent requests, and its own
// connection pool.
// wrap, if not nil, wraps the transport (to record the history).
func (h *harness) newAttacker(ctx context.Context, workers, maxWorkers int, wrap func(http.RoundTripper) http.RoundTripper) (*vegeta.Attacker, *http.Transport) {
	tr := &http.Transport{
		Proxy:               nil, // the replicas are talked to directly
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: maxWorkers,
		IdleConnTimeout:     30 * time.Second,
	}
	var rt http.RoundTripper = tr
	if wrap != nil {
		rt = wrap(tr)
	}
	client := &http.Client{
		Timeout:   h.cfg.Timeout,
		Transport: ctxTransport{ctx: ctx, base: rt},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	return vegeta.NewAttacker(
		vegeta.Client(client),
		vegeta.Workers(uint64(workers)),
		vegeta.MaxWorkers(uint64(maxWorkers)),
		vegeta.MaxBody(64<<10),
	), tr
}

// scrape reads every replica's lock wait histograms; nil entries where a
// replica's /metrics could not be read or has none.
func (h *harness) scrape(ctx context.Context) []*histSnapshot {
	out := make([]*histSnapshot, len(h.replicas))
	for i, base := range h.replicas {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		text, err := h.api.metrics(cctx, base)
		cancel()
		if err != nil {
			if !h.metricsWarned {
				h.metricsWarned = true
				h.logf("note: no lock wait metrics from %s: %v", base, err)
			}
			continue
		}
		// nil when no lock wait has been observed yet: the service's
		// histogram series appear with their first observation.
		out[i] = parseLockWait(text)
	}
	return out
}

// share is part i of total split over n: the parts differ by at most one
// and add up to total.
func share(total, n, i int) int {
	s := total / n
	if i < total%n {
		s++
	}
	return s
}

// salesRate is the rate at which sales completed while the stock lasted:
// k sales over the time from the attack's start to the completion of the
// k-th, where k is 95% of the sales (all of them when there are fewer than
// 20), so that one straggler (a slow response, a pause on a busy machine)
// does not stretch the window. Counting from the start, not from the first
// sale, keeps it at or below the offered rate: the k-th sale cannot finish
// before the k-th request was sent.
func salesRate(sales []sale, start time.Time) float64 {
	if len(sales) == 0 {
		return 0
	}
	sorted := make([]time.Time, len(sales))
	for i, s := range sales {
		sorted[i] = s.end
	}
	slices.SortFunc(sorted, func(a, b time.Time) int { return a.Compare(b) })
	k := len(sorted)
	if k >= 20 {
		k = (k*95 + 99) / 100
	}
	if d := sorted[k-1].Sub(start).Seconds(); d > 0 {
		return float64(k) / d
	}
	return 0
}

// progress draws a live line on the log while an attack runs and returns a
// function that stops it and ends the line.
func (h *harness) progress(strategy string, t *tally, started time.Time) func() {
	if h.cfg.Quiet {
		return func() {}
	}
	every := 250 * time.Millisecond
	if !h.tty {
		every = 2 * time.Second
	}
	line := func() string {
		el := time.Since(started)
		sent := t.sent.Load()
		rate := 0.0
		if el > 0 {
			rate = float64(sent) / el.Seconds()
		}
		return fmt.Sprintf("  %-11s %5.1fs  sent %6d (%6.1f/s)  answered %6d  sold %6d  sold out %6d  503 %5d  errors %4d",
			strategy, el.Seconds(), sent, rate, t.done.Load(), t.units.Load(), t.soldOut.Load(), t.unavailable.Load(), t.other.Load()+t.transport.Load())
	}
	stop := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				if h.tty {
					fmt.Fprintf(h.log, "\r%s\x1b[K\n", line())
				} else {
					fmt.Fprintln(h.log, line())
				}
				return
			case <-tick.C:
				if h.tty {
					fmt.Fprintf(h.log, "\r%s\x1b[K", line())
				} else {
					fmt.Fprintln(h.log, line())
				}
			}
		}
	}()
	return func() {
		close(stop)
		<-finished
	}
}

// warmup sends atomic decrements of a scratch sku for cfg.Warmup, so
// that the replicas' connection pools (to MongoDB, to Redis, from the
// harness) are open before the first measured run, which would otherwise
// pay for them alone. The results are discarded.
func (h *harness) warmup(ctx context.Context) error {
	if h.cfg.Warmup <= 0 {
		return nil
	}
	sku := h.prefix + "-warmup"
	if err := h.api.setStock(ctx, h.replicas[0], sku, maxStock); err != nil {
		return fmt.Errorf("warm-up: reset stock: %w", err)
	}
	rate := h.cfg.Rate
	if rate == 0 {
		rate = 100
	}
	h.logf("warming up: %s of atomic decrements on %s at %d req/s...", h.cfg.Warmup, sku, rate)
	atk, tr := h.newAttacker(ctx, h.cfg.Workers, h.cfg.MaxWorkers, nil)
	defer tr.CloseIdleConnections()
	targeter := decrementTargeter(h.replicas, []string{sku}, newSKUPicker(1, 0, 1), 1, []string{"atomic"}, "")
	n, failed := 0, 0
	for r := range atk.Attack(targeter, pacer(rate, 0), h.cfg.Warmup, "warmup") {
		n++
		if r.Code != 200 {
			failed++
		}
	}
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	h.logf("  warm-up: %d requests, %d not 200", n, failed)
	return nil
}

// runAll runs every strategy of the config in turn.
func (h *harness) runAll(ctx context.Context) ([]report.Run, error) {
	var runs []report.Run
	if err := h.warmup(ctx); err != nil {
		return nil, err
	}
	strategies := h.cfg.Strategies
	if h.cfg.Mixed {
		strategies = []string{mixedRun}
	}
	for i, s := range strategies {
		h.logf("[%d/%d] %s: stock %d × %d sku, %s", i+1, len(strategies), s, h.cfg.Stock, h.cfg.SKUs, h.loadText())
		run, err := h.runStrategy(ctx, s, nil)
		if err != nil {
			return runs, err
		}
		h.logf("  → %s: sold %d of %d, remaining %d, oversold %d, lost updates %d, ledger mismatch %d, linearizable %s (%s)",
			s, run.Sold, run.Initial, run.Remaining, run.Oversold, run.LostUpdates, run.LedgerMismatch, run.Linearizable, run.Verdict)
		runs = append(runs, run)
	}
	return runs, nil
}

func (h *harness) loadText() string {
	rate := fmt.Sprintf("%d req/s", h.cfg.Rate)
	if h.cfg.Rate == 0 {
		rate = fmt.Sprintf("unpaced with %d workers", h.cfg.MaxWorkers)
	}
	switch {
	case h.cfg.Requests > 0 && h.cfg.Duration > 0:
		return fmt.Sprintf("%s, %d requests or %s", rate, h.cfg.Requests, h.cfg.Duration)
	case h.cfg.Requests > 0:
		return fmt.Sprintf("%s, %d requests", rate, h.cfg.Requests)
	default:
		return fmt.Sprintf("%s for %s", rate, h.cfg.Duration)
	}
}

// summarize returns the outcomes in a stable order, and whether the
// harness may exit 0.
func summarize(runs []report.Run) (ok bool, lines []string) {
	var outs []verdict.Outcome
	for _, r := range runs {
		outs = append(outs, verdict.Outcome(r.Verdict))
	}
	for _, r := range runs {
		if r.Fault != "" {
			// Fault drills are many: their table says it all, the
			// lines name only the failures.
			if verdict.Outcome(r.Verdict) == verdict.Fail {
				lines = append(lines, fmt.Sprintf("FAIL  %s, %s, repeat %d: %s", r.Fault, r.Strategy, r.Repeat, strings.Join(r.Problems, "; ")))
			}
			continue
		}
		switch verdict.Outcome(r.Verdict) {
		case verdict.Fail:
			lines = append(lines, fmt.Sprintf("FAIL  %s: %s", r.Strategy, strings.Join(r.Problems, "; ")))
		case verdict.Demonstrated:
			lines = append(lines, fmt.Sprintf("ok    %s: race demonstrated (oversold %d, lost updates %d, ledger mismatch %d, linearizable %s), as expected of an unsafe strategy", r.Strategy, r.Oversold, r.LostUpdates, r.LedgerMismatch, r.Linearizable))
		case verdict.NotReproduced:
			lines = append(lines, fmt.Sprintf("ok    %s: race not reproduced in this run (more load, concurrency or --rmw-delay makes it likelier)", r.Strategy))
		default:
			lines = append(lines, fmt.Sprintf("pass  %s (linearizable %s)", r.Strategy, r.Linearizable))
		}
	}
	return verdict.OK(outs...), lines
}
