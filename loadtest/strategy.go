package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
	"github.com/tsenart/vegeta/v12/lib/plot"

	"github.com/stocklock/stocklock/loadtest/history"
	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/loadtest/verdict"
)

// runStrategy resets the stock, attacks with one strategy, reads the
// stock and the ledger back and checks them. With fs, it is a fault drill:
// the drill's fault is injected while the attack runs.
func (h *harness) runStrategy(ctx context.Context, strategy string, fs *faultSpec) (report.Run, error) {
	drillNo := 0
	if fs != nil {
		h.drills++
		drillNo = h.drills
	}
	writers := h.writers(strategy)
	run := h.newRun(strategy, writers, drillNo, fs)

	// The ledger window starts a little before the reset, so that a
	// replica clock slightly behind ours does not hide the first orders;
	// the skus are fresh, so nothing older can fall into it.
	since := time.Now().Add(-2 * time.Second)
	rec := history.NewRecorder(time.Now())
	if err := h.reset(ctx, rec, run.SKUs); err != nil {
		return run, fmt.Errorf("%s: %w", strategy, err)
	}
	before := h.scrape(ctx)

	atk, err := h.startAttack(ctx, strategy, run.SKUs, writers, rec)
	if err != nil {
		return run, fmt.Errorf("%s: %w", strategy, err)
	}
	defer atk.close()
	stopProgress := h.progress(strategy, &atk.tally, atk.started)
	stopReads := h.startReads(ctx, rec, run.SKUs)
	injected := h.startFault(ctx, &run, fs, atk.started)
	obs := classify(atk, &run, h.cfg.Qty)
	stopReads()
	stopProgress()

	ev, err := h.endFault(ctx, &run, fs, injected)
	if err != nil {
		return run, err
	}
	if err := ctx.Err(); err != nil {
		return run, fmt.Errorf("%s: %w", strategy, context.Cause(ctx))
	}
	judgeFault(&run, fs, ev, obs.sales)
	fillTotals(&run, obs)
	if fs == nil {
		// Fault drills are dozens of runs: their table and chart tell the
		// story, not a plot each.
		h.writePlot(&run, obs.plot)
	}

	in, err := h.readBack(ctx, &run, since, obs)
	if err != nil {
		return run, fmt.Errorf("%s: %w", strategy, err)
	}
	if p99, ok := lockWaitP99(before, h.scrape(ctx), strategy); ok {
		run.LockWaitP99 = &p99
	}
	if atk.proxy != nil {
		run.Cuts = int(atk.proxy.Cuts())
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
	judge(&run, in, verdict.Check(in), lin)
	return run, nil
}

// newRun is the report of one run before anything is sent: its settings
// and empty counters.
func (h *harness) newRun(strategy string, writers []string, drillNo int, fs *faultSpec) report.Run {
	run := report.Run{
		Strategy:    strategy,
		Safe:        verdict.SafeAll(writers) && (fs == nil || !fs.drill.demo),
		SKUs:        h.skus(strategy, drillNo),
		Stock:       h.cfg.Stock,
		Qty:         h.cfg.Qty,
		TargetRate:  h.cfg.Rate,
		StatusCodes: map[string]int{},
		ByReplica:   map[string]int{},
	}
	if fs != nil {
		run.Fault, run.Repeat, run.Demo = fs.drill.label, fs.repeat, fs.drill.demo
		run.Codes = map[string]int{}
	}
	return run
}

// reset sets every sku's stock to the configured stock, through the
// replicas in turn, and reads it back from the last replica: a run starts
// only when every replica sees the reset.
func (h *harness) reset(ctx context.Context, rec *history.Recorder, skus []string) error {
	for i, sku := range skus {
		base := h.replicas[i%len(h.replicas)]
		if err := h.resetStock(ctx, rec, base, sku, h.cfg.Stock); err != nil {
			return fmt.Errorf("reset stock: %w", err)
		}
	}
	for _, sku := range skus {
		it, err := h.api.getItem(ctx, h.replicas[len(h.replicas)-1], sku)
		if err != nil {
			return fmt.Errorf("read back the reset stock: %w", err)
		}
		if it.Stock != h.cfg.Stock {
			return fmt.Errorf("sku %s reads %d after PUT %d", sku, it.Stock, h.cfg.Stock)
		}
	}
	return nil
}

// attack is one run's attack under way: one Vegeta attacker per target,
// their results merged into one channel that is closed when every
// attacker has finished.
type attack struct {
	results <-chan *vegeta.Result
	tally   tally
	started time.Time
	proxy   *cutProxy // the proxy cutting answers (--retries); nil without
	done    chan struct{}
	closers []func()
}

// finished tells the attack that its results have been drained.
func (a *attack) finished() { close(a.done) }

// close releases the attack's connections and its proxy.
func (a *attack) close() {
	for _, c := range a.closers {
		c()
	}
}

// startAttack starts one attacker per target, each with an equal share of
// the rate, the request count and the workers, as if every replica had
// clients of its own. With one attacker alternating between them, a
// frozen replica would soon hold every worker (its requests hang) and
// starve the live ones of requests: the client's head-of-line blocking,
// not the service's, would then be measured. Ctrl-C (ctx) stops every
// attacker.
func (h *harness) startAttack(ctx context.Context, strategy string, skus, writers []string, rec *history.Recorder) (*attack, error) {
	cfg := h.cfg
	targets, proxy, err := h.attackTargets()
	if err != nil {
		return nil, err
	}
	results := make(chan *vegeta.Result)
	a := &attack{results: results, proxy: proxy, done: make(chan struct{})}
	if proxy != nil {
		a.closers = append(a.closers, func() { _ = proxy.Close() })
	}
	picker := newSKUPicker(cfg.SKUs, cfg.Skew, time.Now().UnixNano())
	n := len(targets)
	attackers := make([]*vegeta.Attacker, n)
	var attacking sync.WaitGroup
	for i, base := range targets {
		atk, tr := h.newAttacker(ctx, max(1, cfg.Workers/n), max(1, cfg.MaxWorkers/n), h.recording(rec, base))
		a.closers = append(a.closers, tr.CloseIdleConnections)
		attackers[i] = atk
		keys := ""
		if cfg.Retries > 0 {
			keys = fmt.Sprintf("%s-r%d", skus[0], i)
		}
		targeter := decrementTargeter([]string{base}, skus, picker, cfg.Qty, writers, keys)
		counted := func(tg *vegeta.Target) error {
			a.tally.sent.Add(1)
			return targeter(tg)
		}
		rate := share(cfg.Rate, n, i)
		if cfg.Rate > 0 {
			rate = max(rate, 1) // 0 would mean unpaced
		}
		attacking.Go(func() {
			for r := range atk.Attack(counted, pacer(rate, share(cfg.Requests, n, i)), cfg.Duration, strategy) {
				results <- r
			}
		})
	}
	a.started = time.Now()
	go func() {
		attacking.Wait()
		close(results)
	}()
	go func() {
		select {
		case <-ctx.Done():
			for _, atk := range attackers {
				atk.Stop()
			}
		case <-a.done:
		}
	}()
	return a, nil
}

// startReads starts the history's periodic reads of the stock, if
// configured, and returns the function that stops them and waits.
func (h *harness) startReads(ctx context.Context, rec *history.Recorder, skus []string) func() {
	if h.cfg.ReadEvery <= 0 {
		return func() {}
	}
	stop := make(chan struct{})
	var reading sync.WaitGroup
	reading.Go(func() { h.readLoop(ctx, rec, skus, h.cfg.ReadEvery, stop) })
	return func() {
		close(stop)
		reading.Wait()
	}
}

// injected is what a fault's injector returned.
type injected struct {
	ev  *faultEvent
	err error
}

// startFault runs the drill's injector, if it has one, in its own
// goroutine while the attack runs; nil when there is nothing to inject.
func (h *harness) startFault(ctx context.Context, run *report.Run, fs *faultSpec, started time.Time) <-chan injected {
	if fs == nil || fs.drill.inject == nil {
		return nil
	}
	done := make(chan injected, 1)
	fc := &faultCtx{h: h, env: fs.env, strategy: run.Strategy, started: started, repeat: fs.repeat}
	go func() {
		ev, err := fs.drill.inject(ctx, fc)
		done <- injected{ev, err}
	}()
	return done
}

// endFault waits for the injector (it ends within the attack, except a
// pause that began near its end), then undoes the fault (a killed replica
// or etcd member comes back) so that the read-back and the next run find
// everything up. It notes what was done in run.FaultNote and returns the
// event, nil when no fault struck.
func (h *harness) endFault(ctx context.Context, run *report.Run, fs *faultSpec, done <-chan injected) (*faultEvent, error) {
	if fs == nil {
		return nil, nil
	}
	if done == nil {
		run.FaultNote = "no injection, the configuration is the fault: " + fs.drill.flags.String()
		return nil, nil
	}
	in := <-done
	switch {
	case errors.Is(in.err, errSkipped):
		run.FaultNote = in.err.Error()
	case in.err != nil && ctx.Err() == nil:
		return nil, fmt.Errorf("%s, %s: inject the fault: %w", run.Fault, run.Strategy, in.err)
	case in.ev != nil:
		run.FaultNote = in.ev.Note
		if in.ev.cleanup != nil {
			if err := in.ev.cleanup(ctx); err != nil && ctx.Err() == nil {
				return nil, fmt.Errorf("%s, %s: undo the fault: %w", run.Fault, run.Strategy, err)
			}
		}
		return in.ev, nil
	}
	return nil, nil
}

// observed is what the answers of one attack showed.
type observed struct {
	metrics  vegeta.Metrics
	tally    *tally
	acked    []verdict.Order
	sales    []sale
	lastSale time.Time
	// noAnswer counts, per sku, the requests that reached a replica and
	// got no HTTP answer (reset, timeout; not refused).
	noAnswer map[string]int
	plot     *plot.Plot
}

// classify drains the attack's results, classifying every answer: the
// tally, run's status codes, sales by replica, refusal codes (drills) and
// error sample, and the observations the verdict needs. It returns when
// the attack is over.
func classify(a *attack, run *report.Run, qty int) *observed {
	t := &a.tally
	obs := &observed{
		tally:    t,
		noAnswer: map[string]int{},
		plot:     plot.New(plot.Title(fmt.Sprintf("stocklock %s: latency by outcome", run.Strategy)), plot.Label(classLabel)),
	}
	errSeen := map[string]bool{}
	for r := range a.results {
		t.done.Add(1)
		obs.metrics.Add(r)
		_ = obs.plot.Add(r) // a plot glitch must not stop the run
		cls, order, note := interpret(r, qty)
		run.StatusCodes[fmt.Sprint(r.Code)]++
		switch cls {
		case verdict.Sold:
			t.orders.Add(1)
			t.units.Add(int64(order.Qty))
			obs.acked = append(obs.acked, order)
			run.ByReplica[order.Replica]++
			if e := r.End(); e.After(obs.lastSale) {
				obs.lastSale = e
			}
			obs.sales = append(obs.sales, sale{start: r.Timestamp, end: r.End(), replica: order.Replica, fence: order.Fence})
		case verdict.SoldOut:
			t.soldOut.Add(1)
		case verdict.Unavailable:
			t.unavailable.Add(1)
		case verdict.Other:
			t.other.Add(1)
			// A 5xx other than 503 (500 outcome_unknown above all) does
			// not say whether the sale happened: like a lost answer, it
			// may have sold, as the history check also assumes.
			if r.Code >= 500 {
				obs.noAnswer[skuOfURL(r.URL)]++
			}
		case verdict.Transport:
			t.transport.Add(1)
			if !refused(note) {
				obs.noAnswer[skuOfURL(r.URL)]++
			}
		}
		if cls == verdict.Sold || cls == verdict.SoldOut {
			continue
		}
		if run.Codes != nil {
			if cls == verdict.Transport {
				run.Codes[transportKind(note)]++
			} else {
				run.Codes[note]++
			}
		}
		if len(errSeen) < 5 && !errSeen[note] {
			errSeen[note] = true
			run.ErrorSample = append(run.ErrorSample, note)
		}
	}
	a.finished()
	obs.metrics.Close()
	obs.plot.Close()
	return obs
}

// judgeFault records what the fault did to the sales: how long they took
// to resume after it struck, and whether fencing tokens kept increasing
// across it (fenced strategies, not the deliberately weakened drills).
func judgeFault(run *report.Run, fs *faultSpec, ev *faultEvent, sales []sale) {
	if fs == nil {
		return
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
	if slices.Contains(fencedStrategies, run.Strategy) && !fs.drill.demo {
		// With no injected fault (clock skew) only reuse is checked: two
		// sales under one token would mean two holders with one grant.
		run.Tokens = tokenCheck(sales, ev)
	}
}

// fillTotals copies the attack's counts, rates and latencies into run.
func fillTotals(run *report.Run, obs *observed) {
	m, t := &obs.metrics, obs.tally
	run.Requests = int(m.Requests)
	run.Orders = int(t.orders.Load())
	run.SoldOut = int(t.soldOut.Load())
	run.Unavailable = int(t.unavailable.Load())
	run.Other = int(t.other.Load())
	run.Transport = int(t.transport.Load())
	run.AttackSeconds = (m.Duration + m.Wait).Seconds()
	run.ReqPerSec = m.Rate
	if !obs.lastSale.IsZero() {
		run.SellingSeconds = obs.lastSale.Sub(m.Earliest).Seconds()
		run.SalesPerSec = salesRate(obs.sales, m.Earliest)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	run.Latency = report.Latency{P50: ms(m.Latencies.P50), P95: ms(m.Latencies.P95), P99: ms(m.Latencies.P99), Max: ms(m.Latencies.Max)}
	if len(run.ByReplica) == 0 {
		run.ByReplica = nil
	}
}

// writePlot writes the run's Vegeta plot to the output directory and
// names it in run; a plot that cannot be written is left out.
func (h *harness) writePlot(run *report.Run, pl *plot.Plot) {
	name := "plot-" + run.Strategy + ".html"
	f, err := os.Create(filepath.Join(h.outDir, name))
	if err != nil {
		return
	}
	_, werr := pl.WriteTo(f)
	if cerr := f.Close(); werr == nil && cerr == nil {
		run.Plot = name
	}
}

// readBack lets stragglers land for the settle time (a response can beat
// its own ledger write only if the service acknowledges before writing,
// which would itself be a finding), waits for pending orders, then reads
// every sku's stock and ledger from the first replica.
func (h *harness) readBack(ctx context.Context, run *report.Run, since time.Time, obs *observed) (verdict.Input, error) {
	in := verdict.Input{Acked: obs.acked, NoAnswer: obs.noAnswer}
	if err := sleepCtx(ctx, h.cfg.Settle); err != nil {
		return in, err
	}
	reader := h.replicas[0]
	var err error
	if in.Drained, err = h.waitDrained(ctx, reader, run.SKUs); err != nil {
		return in, err
	}
	if !in.Drained {
		run.Problems = append(run.Problems, fmt.Sprintf("orders still pending %s after the attack: stock and ledger compared without them", drainWait))
	}
	for _, sku := range run.SKUs {
		it, err := h.api.getItem(ctx, reader, sku)
		if err != nil {
			return in, fmt.Errorf("read the stock back: %w", err)
		}
		in.Items = append(in.Items, verdict.Item{SKU: sku, Initial: h.cfg.Stock, Remaining: it.Stock})
		orders, err := h.api.orders(ctx, reader, sku, since)
		if err != nil {
			return in, fmt.Errorf("read the ledger: %w", err)
		}
		in.Ledger = append(in.Ledger, orders...)
	}
	return in, nil
}

// judge puts the verdict's arithmetic and the history's check into run
// and decides the run's verdict. The problems the verdict and the history
// find are added to those the run already noted (a fault's sales that did
// not resume, orders still pending), never in their place.
func judge(run *report.Run, in verdict.Input, res verdict.Result, lin linearizability) {
	run.Unrecorded, run.DoubleSold, run.DoubleSoldKeys = res.Unrecorded, res.DoubleSold, res.DoubleSoldKeys
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
	run.Problems = append(run.Problems, res.Problems...)
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
}
