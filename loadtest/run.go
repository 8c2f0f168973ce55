package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
	"github.com/tsenart/vegeta/v12/lib/plot"

	"github.com/stocklock/stocklock/loadtest/history"
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

// runStrategy resets the stock, attacks with one strategy, reads the
// stock and the ledger back and checks them. With fs, it is a fault drill:
// the drill's fault is injected while the attack runs.
func (h *harness) runStrategy(ctx context.Context, strategy string, fs *faultSpec) (report.Run, error) {
	cfg := h.cfg
	drillNo := 0
	if fs != nil {
		h.drills++
		drillNo = h.drills
	}
	writers := h.writers(strategy)
	run := report.Run{
		Strategy:    strategy,
		Safe:        verdict.SafeAll(writers) && (fs == nil || !fs.drill.demo),
		SKUs:        h.skus(strategy, drillNo),
		Stock:       cfg.Stock,
		Qty:         cfg.Qty,
		TargetRate:  cfg.Rate,
		StatusCodes: map[string]int{},
		ByReplica:   map[string]int{},
	}

	// Reset. The ledger window starts a little before, so that a replica
	// clock slightly behind ours does not hide the first orders; the skus
	// are fresh, so nothing older can fall into it.
	since := time.Now().Add(-2 * time.Second)
	rec := history.NewRecorder(time.Now())
	for i, sku := range run.SKUs {
		base := h.replicas[i%len(h.replicas)]
		if err := h.resetStock(ctx, rec, base, sku, cfg.Stock); err != nil {
			return run, fmt.Errorf("%s: reset stock: %w", strategy, err)
		}
	}
	for _, sku := range run.SKUs {
		it, err := h.api.getItem(ctx, h.replicas[len(h.replicas)-1], sku)
		if err != nil {
			return run, fmt.Errorf("%s: read back the reset stock: %w", strategy, err)
		}
		if it.Stock != cfg.Stock {
			return run, fmt.Errorf("%s: sku %s reads %d after PUT %d", strategy, sku, it.Stock, cfg.Stock)
		}
	}
	before := h.scrape(ctx)

	// Attack: one attacker per replica, each with an equal share of the
	// rate, the request count and the workers, as if every replica had
	// clients of its own. With one attacker alternating between them, a
	// frozen replica would soon hold every worker (its requests hang) and
	// starve the live one of requests: the client's head-of-line blocking,
	// not the service's, would then be measured.
	picker := newSKUPicker(cfg.SKUs, cfg.Skew, time.Now().UnixNano())
	var t tally
	n := len(h.replicas)
	attackers := make([]*vegeta.Attacker, n)
	results := make(chan *vegeta.Result)
	var attacking sync.WaitGroup
	targets, proxy, err := h.attackTargets()
	if err != nil {
		return run, fmt.Errorf("%s: %w", strategy, err)
	}
	if proxy != nil {
		defer func() { _ = proxy.Close() }()
	}
	for i, base := range targets {
		atk, tr := h.newAttacker(ctx, max(1, cfg.Workers/n), max(1, cfg.MaxWorkers/n), h.recording(rec, base))
		defer tr.CloseIdleConnections()
		attackers[i] = atk
		keys := ""
		if cfg.Retries > 0 {
			keys = fmt.Sprintf("%s-r%d", run.SKUs[0], i)
		}
		targeter := decrementTargeter([]string{base}, run.SKUs, picker, cfg.Qty, writers, keys)
		counted := func(tg *vegeta.Target) error {
			t.sent.Add(1)
			return targeter(tg)
		}
		rate := share(cfg.Rate, n, i)
		if cfg.Rate > 0 {
			rate = max(rate, 1) // 0 would mean unpaced
		}
		attacking.Add(1)
		go func() {
			defer attacking.Done()
			for r := range atk.Attack(counted, pacer(rate, share(cfg.Requests, n, i)), cfg.Duration, strategy) {
				results <- r
			}
		}()
	}
	go func() {
		attacking.Wait()
		close(results)
	}()

	started := time.Now()
	stopProgress := h.progress(strategy, &t, started)
	stopReads := make(chan struct{})
	var reading sync.WaitGroup
	if cfg.ReadEvery > 0 {
		reading.Go(func() { h.readLoop(ctx, rec, run.SKUs, cfg.ReadEvery, stopReads) })
	}

	// The fault, injected from its own goroutine while the attack runs.
	type injected struct {
		ev  *faultEvent
		err error
	}
	var injDone chan injected
	if fs != nil {
		run.Fault, run.Repeat, run.Demo = fs.drill.label, fs.repeat, fs.drill.demo
		run.Codes = map[string]int{}
		if fs.drill.inject != nil {
			injDone = make(chan injected, 1)
			fc := &faultCtx{h: h, env: fs.env, strategy: strategy, started: started, repeat: fs.repeat}
			go func() {
				ev, err := fs.drill.inject(ctx, fc)
				injDone <- injected{ev, err}
			}()
		}
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			for _, atk := range attackers {
				atk.Stop()
			}
		case <-done:
		}
	}()

	var (
		m        vegeta.Metrics
		acked    []verdict.Order
		lastSale time.Time
		sales    []sale
		// noAnswer counts, per sku, the requests that reached a replica
		// and got no HTTP answer (reset, timeout; not refused).
		noAnswer = map[string]int{}
		errSeen  = map[string]bool{}
		pl       = plot.New(plot.Title(fmt.Sprintf("stocklock %s: latency by outcome", strategy)), plot.Label(classLabel))
	)
	for r := range results {
		t.done.Add(1)
		m.Add(r)
		_ = pl.Add(r) // a plot glitch must not stop the run
		cls, order, note := interpret(r, cfg.Qty)
		run.StatusCodes[fmt.Sprint(r.Code)]++
		switch cls {
		case verdict.Sold:
			t.orders.Add(1)
			t.units.Add(int64(order.Qty))
			acked = append(acked, order)
			run.ByReplica[order.Replica]++
			if e := r.End(); e.After(lastSale) {
				lastSale = e
			}
			sales = append(sales, sale{start: r.Timestamp, end: r.End(), replica: order.Replica, fence: order.Fence})
		case verdict.SoldOut:
			t.soldOut.Add(1)
		case verdict.Unavailable:
			t.unavailable.Add(1)
		case verdict.Other:
			t.other.Add(1)
		case verdict.Transport:
			t.transport.Add(1)
			if !refused(note) {
				noAnswer[skuOfURL(r.URL)]++
			}
		}
		if run.Codes != nil && cls != verdict.Sold && cls != verdict.SoldOut {
			if cls == verdict.Transport {
				run.Codes[transportKind(note)]++
			} else {
				run.Codes[note]++
			}
		}
		if cls != verdict.Sold && cls != verdict.SoldOut && len(errSeen) < 5 && !errSeen[note] {
			errSeen[note] = true
			run.ErrorSample = append(run.ErrorSample, note)
		}
	}
	close(done)
	close(stopReads)
	reading.Wait()
	stopProgress()
	m.Close()
	pl.Close()
	var ev *faultEvent
	if injDone != nil {
		// The injector ends within the attack, except a pause that began
		// near its end; wait for it, then undo the fault (a killed replica
		// or etcd member comes back) before reading anything back.
		in := <-injDone
		switch {
		case errors.Is(in.err, errSkipped):
			run.FaultNote = in.err.Error()
		case in.err != nil && ctx.Err() == nil:
			return run, fmt.Errorf("%s, %s: inject the fault: %w", run.Fault, strategy, in.err)
		case in.ev != nil:
			ev = in.ev
			run.FaultNote = ev.Note
			if ev.cleanup != nil {
				if err := ev.cleanup(ctx); err != nil && ctx.Err() == nil {
					return run, fmt.Errorf("%s, %s: undo the fault: %w", run.Fault, strategy, err)
				}
			}
		}
	} else if fs != nil {
		run.FaultNote = "no injection, the configuration is the fault: " + describeArgs(fs.drill.args)
	}
	if err := ctx.Err(); err != nil {
		return run, fmt.Errorf("%s: %w", strategy, context.Cause(ctx))
	}
	if ev != nil {
		run.Injected = true
		if d, ok := recovery(sales, ev); ok {
			secs := d.Seconds()
			run.RecoverySeconds = &secs
		} else {
			run.Problems = append(run.Problems, "sales did not resume after the fault before the attack ended")
		}
	}
	if fs != nil && slices.Contains(fencedStrategies, strategy) && !fs.drill.demo {
		// With no injected fault (clock skew) only reuse is checked: two
		// sales under one token would mean two holders with one grant.
		run.Tokens = tokenCheck(sales, ev)
	}

	run.Requests = int(m.Requests)
	run.Orders = int(t.orders.Load())
	run.SoldOut = int(t.soldOut.Load())
	run.Unavailable = int(t.unavailable.Load())
	run.Other = int(t.other.Load())
	run.Transport = int(t.transport.Load())
	attack := m.Duration + m.Wait
	run.AttackSeconds = attack.Seconds()
	run.ReqPerSec = m.Rate
	if !lastSale.IsZero() {
		run.SellingSeconds = lastSale.Sub(m.Earliest).Seconds()
		run.SalesPerSec = salesRate(sales, m.Earliest)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	run.Latency = report.Latency{P50: ms(m.Latencies.P50), P95: ms(m.Latencies.P95), P99: ms(m.Latencies.P99), Max: ms(m.Latencies.Max)}
	if len(run.ByReplica) == 0 {
		run.ByReplica = nil
	}

	// Fault drills are dozens of runs: their table and chart tell the
	// story, not a plot each.
	if fs == nil {
		plotName := "plot-" + strategy + ".html"
		if f, err := os.Create(filepath.Join(h.outDir, plotName)); err == nil {
			_, werr := pl.WriteTo(f)
			if cerr := f.Close(); werr == nil && cerr == nil {
				run.Plot = plotName
			}
		}
	}

	// Let stragglers land (a response can beat its own ledger write only
	// if the service acknowledges before writing, which would itself be a
	// finding), then read everything back.
	if cfg.Settle > 0 {
		select {
		case <-time.After(cfg.Settle):
		case <-ctx.Done():
			return run, context.Cause(ctx)
		}
	}
	in := verdict.Input{Acked: acked, NoAnswer: noAnswer}
	reader := h.replicas[0]
	if in.Drained, err = h.waitDrained(ctx, reader, run.SKUs); err != nil {
		return run, fmt.Errorf("%s: %w", strategy, err)
	}
	if !in.Drained {
		run.Problems = append(run.Problems, fmt.Sprintf("orders still pending %s after the attack: stock and ledger compared without them", drainWait))
	}
	for _, sku := range run.SKUs {
		it, err := h.api.getItem(ctx, reader, sku)
		if err != nil {
			return run, fmt.Errorf("%s: read the stock back: %w", strategy, err)
		}
		in.Items = append(in.Items, verdict.Item{SKU: sku, Initial: cfg.Stock, Remaining: it.Stock})
		orders, err := h.api.orders(ctx, reader, sku, since)
		if err != nil {
			return run, fmt.Errorf("%s: read the ledger: %w", strategy, err)
		}
		in.Ledger = append(in.Ledger, orders...)
	}
	after := h.scrape(ctx)
	if p99, ok := lockWaitP99(before, after, strategy); ok {
		run.LockWaitP99 = &p99
	}

	res := verdict.Check(in)
	run.Unrecorded, run.DoubleSold, run.DoubleSoldKeys = res.Unrecorded, res.DoubleSold, res.DoubleSoldKeys
	if proxy != nil {
		run.Cuts = int(proxy.Cuts())
	}
	ops := rec.Ops()
	run.Resent = resent(ops)
	if strategy == mixedRun {
		run.Strategies, run.Outcomes = writers, outcomesByStrategy(ops)
	}
	lin, err := h.checkHistory(ops, historyName(strategy, drillNo))
	if err != nil {
		return run, fmt.Errorf("%s: %w", strategy, err)
	}
	run.History, run.HistoryOps, run.Linearizable = lin.file, lin.ops, string(lin.verdict)
	run.Conflicts, run.Violations, run.CheckSeconds = lin.conflicts, lin.pictures, lin.elapsed.Seconds()
	run.Sold = res.Sold
	run.Initial = res.Initial
	run.Remaining = res.Remaining
	run.Oversold = res.Oversold
	run.LostUpdates = res.LostUpdates
	run.Unacknowledged = res.Unacknowledged
	run.LedgerMismatch = res.LedgerMismatch
	run.Ledger = res.Ledger
	run.LedgerOrders = len(in.Ledger)
	run.Problems = res.Problems
	for _, c := range lin.conflicts {
		if lin.verdict == history.No {
			run.Problems = append(run.Problems, "history not linearizable: "+c)
		} else {
			run.Problems = append(run.Problems, "history's linearizability unknown: "+c)
		}
	}
	if res.Unacknowledged > 0 {
		run.Problems = append(run.Problems, fmt.Sprintf("%d units left the stock without a 200 the harness saw (timeouts or transport errors)", res.Unacknowledged))
	}
	run.Verdict = string(verdict.Decide(run.Safe, res.Anomalous() || lin.verdict == history.No))
	if tc := run.Tokens; tc != nil && !tc.OK {
		run.Problems = append(run.Problems, fmt.Sprintf("fencing tokens did not keep increasing across the fault: highest before %d, lowest after %d, %d reused", tc.MaxBefore, tc.MinAfter, tc.Reused))
		if run.Safe {
			run.Verdict = string(verdict.Fail)
		}
	}
	return run, nil
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
