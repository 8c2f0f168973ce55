package harness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	vegeta "github.com/tsenart/vegeta/v12/lib"
	"github.com/tsenart/vegeta/v12/lib/plot"

	"github.com/stocklock/stocklock/loadtest/attack"
	"github.com/stocklock/stocklock/loadtest/drill"
	"github.com/stocklock/stocklock/loadtest/env"
	"github.com/stocklock/stocklock/loadtest/history"
	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/loadtest/verdict"
	"github.com/stocklock/stocklock/pkg/stockclient"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// runOpts are what a scenario asks of one run beyond the load.
type runOpts struct {
	drill  *drill.Drill // a fault drill: its fault strikes while the attack runs
	repeat int          // the drill's repeat
	drills Drills       // the drill's settings
	step   bool         // a capacity step: skus of its own, no plot, the history not checked
	retry  *Compare     // re-send unanswered decrements, as its Retries (if any) say
}

// runStrategy resets the stock, attacks with one strategy, reads the
// stock and the ledger back and checks them. Faults asked for with Inject
// strike it.
func (h *Harness) runStrategy(ctx context.Context, strategy string, o runOpts) (report.Run, error) {
	drillNo := 0
	if o.drill != nil || o.step { // every drill and capacity step on skus of its own
		h.drills++
		drillNo = h.drills
	}
	h.runNo++
	writers := []string{strategy} // the strategies whose requests the run sends
	if strategy == mixedRun {
		writers = h.cfg.Strategies
	}
	run := report.Run{
		Strategy:    strategy,
		Safe:        verdict.SafeAll(writers) && (o.drill == nil || !o.drill.Demo),
		SKUs:        h.skus(strategy, drillNo),
		Stock:       h.cfg.Stock,
		Qty:         h.cfg.Qty,
		TargetRate:  h.cfg.Rate,
		StatusCodes: map[string]int{},
		ByReplica:   map[string]int{},
	}
	if o.drill != nil {
		run.Fault, run.Repeat, run.Demo = o.drill.Label, o.repeat, o.drill.Demo
		run.Codes = map[string]int{}
	}
	h.emit(Event{Type: EventRunStart, Run: h.runNo, Strategy: strategy, SKUs: run.SKUs, Initial: run.Stock * len(run.SKUs), Replicas: h.replicaIDs})

	// The ledger window starts a little before the reset, so that a
	// replica clock slightly behind ours does not hide the first orders;
	// the skus are fresh, so nothing older can fall into it.
	since := time.Now().Add(-2 * time.Second)
	rec := history.NewRecorder(time.Now())
	if err := h.reset(ctx, rec, run.SKUs, writers); err != nil {
		return run, fmt.Errorf("%s: %w", strategy, err)
	}
	before := scrape(ctx, h, parseLockWait)
	shards := h.shardsOf(ctx, strategy, run.SKUs, o.drill != nil)
	stopRedisView := h.watchRedisStock(ctx, strategy, writers, run.SKUs)
	defer stopRedisView()
	stopQueueView := h.watchQueued(ctx, strategy, writers)
	defer stopQueueView()

	cfg := h.cfg
	opts := attack.Options{
		Name: strategy, Targets: h.replicas, SKUs: run.SKUs, Writers: writers, Qty: cfg.Qty,
		Rate: cfg.Rate, Requests: cfg.Requests, Duration: cfg.Duration, Timeout: cfg.Timeout,
		Workers: cfg.Workers, MaxWorkers: cfg.MaxWorkers, Skew: cfg.Skew, Recorder: rec,
	}
	if r := o.retry; r != nil && r.Retries > 0 {
		opts.Keys, opts.Retries, opts.AttemptTimeout, opts.CutRate = run.SKUs[0], r.Retries, r.AttemptTimeout, r.CutRate
	}
	atk, err := attack.Start(ctx, opts)
	if err != nil {
		return run, fmt.Errorf("%s: %w", strategy, err)
	}
	defer atk.Close()
	tr, stopProgress := h.track(&run, atk)
	stopReads := h.startReads(ctx, rec, run.SKUs)
	faults := h.startFaults(ctx, run.Strategy, run.SKUs, o, atk.Started)
	obs := classify(atk, &run, h.cfg.Qty, tr)
	stopReads()
	stopProgress()
	stopRedisView()
	stopQueueView()

	ev, err := h.endFaults(ctx, &run, o.drill, faults)
	if err != nil {
		return run, err
	}
	if err := ctx.Err(); err != nil {
		return run, fmt.Errorf("%s: %w", strategy, context.Cause(ctx))
	}
	judgeFault(&run, o.drill, ev, obs.sales, obs.metrics.Earliest)
	fillTotals(&run, obs)
	countShards(&run, shards, obs)
	if o.drill == nil && !o.step {
		// Fault drills and capacity steps are dozens of runs: their table and chart tell the
		// story, not a plot each.
		h.writePlot(&run, obs.plot)
	}

	in, err := h.readBack(ctx, &run, since, obs)
	if err != nil {
		return run, fmt.Errorf("%s: %w", strategy, err)
	}
	if p99, ok := p99Ms(before, scrape(ctx, h, parseLockWait), strategy); ok {
		run.LockWaitP99 = &p99
	}
	run.Cuts = atk.Cuts()
	ops := rec.Ops()
	for _, op := range ops {
		if op.Attempt > 1 { // an attempt beyond its request's first
			run.Resent++
		}
	}
	if strategy == mixedRun {
		run.Strategies, run.Outcomes = writers, outcomesByStrategy(ops)
	}
	run.Linearizable = notChecked
	if !o.step {
		if err := h.checkHistory(&run, ops, "history-"+runTag(strategy, drillNo)); err != nil {
			return run, fmt.Errorf("%s: %w", strategy, err)
		}
	}
	judge(&run, in, verdict.Audit(in))
	for _, t := range h.cfg.Thresholds {
		if c, ok := t.Check(run); ok {
			run.Checks = append(run.Checks, c)
		}
	}
	h.emit(Event{Type: EventRunEnd, Run: h.runNo, Strategy: strategy, Result: &run})
	return run, nil
}

// reset sets every sku's stock to the configured stock, through the
// replicas in turn, and reads it back from the last replica: a run starts
// only when every replica sees the reset. A run whose every writer sells
// from split stock (strategy.Info.SplitsStock) puts it split, so that its
// sales do not pay the split.
func (h *Harness) reset(ctx context.Context, rec *history.Recorder, skus, writers []string) error {
	var opts []stockclient.CallOption
	if splitsStock(writers) {
		opts = append(opts, stockclient.SplitStock())
	}
	for i, sku := range skus {
		if err := h.resetStock(ctx, rec, h.replicas[i%len(h.replicas)], sku, h.cfg.Stock, opts...); err != nil {
			return fmt.Errorf("reset stock: %w", err)
		}
		it, err := h.api.At(h.replicas[len(h.replicas)-1]).GetItem(ctx, sku)
		if err != nil {
			return fmt.Errorf("read back the reset stock: %w", err)
		}
		if int(it.Stock) != h.cfg.Stock {
			return fmt.Errorf("sku %s reads %d after PUT %d", sku, it.Stock, h.cfg.Stock)
		}
	}
	return nil
}

// injections are the faults struck while one attack runs: the drill's
// own, if it has an injector, and those asked for with Inject.
type injections struct {
	stop   func() // the attack is over: no more Inject; waits for the last
	events []*drill.Event
	errs   []error
	// undo are the Cleanups of every event, those an injector returned
	// with its error too: it may have stopped servers or moved a clock
	// before it failed.
	undo []func(context.Context) error
}

// startFaults runs the drill's injector, if it has one, and serves Inject
// while the attack runs, one fault at a time, in a goroutine of its own.
func (h *Harness) startFaults(ctx context.Context, strategy string, skus []string, o runOpts, started time.Time) *injections {
	in, done := &injections{}, make(chan struct{})
	attacking, over := context.WithCancel(ctx)
	d := DefaultDrills() // the live page's replicas run with the defaults
	if o.drill != nil {
		d = o.drills
	}
	base := drill.Ctx{Env: h.env, Probe: h.probe, Strategy: strategy, SKUs: skus, TTL: d.FaultTTL, Search: h.cfg.Duration / 2, AOF: d.RedisAOF}
	strike := func(fault string, inject drill.Injector, at time.Time, repeat int) {
		c := base
		c.Strike, c.Repeat = at, repeat
		ev, err := inject(ctx, &c)
		if ev != nil && ev.Cleanup != nil {
			in.undo = append(in.undo, ev.Cleanup)
		}
		if err != nil {
			in.errs = append(in.errs, err)
			return
		}
		in.events = append(in.events, ev)
		h.emit(Event{Type: EventFault, Run: h.runNo, Strategy: strategy, Fault: fault, Replica: ev.Victim, Shape: ev.Shape,
			At: ev.At, Until: ev.Healed, Text: ev.Note})
	}
	h.setActive(true)
	in.stop = func() {
		h.setActive(false)
		over()
		<-done
	}
	go func() {
		defer close(done)
		if o.drill != nil && o.drill.Inject != nil {
			strike(o.drill.Fault, o.drill.Inject, started.Add(drill.Trigger(h.cfg.Duration)), o.repeat)
		}
		for {
			select {
			case name := <-h.adhoc:
				f, _ := drill.Lookup(name)
				strike(name, f.Inject, time.Now(), h.runNo)
			case <-attacking.Done():
				return
			}
		}
	}()
	return in
}

// endFaults waits for the injections (they end within the attack, except a
// pause that began near its end), then undoes them (a killed replica or
// etcd member comes back) so that the read-back and the next run find
// everything up. It notes what was done in run.FaultNote and returns the
// first fault that struck, nil when none did.
func (h *Harness) endFaults(ctx context.Context, run *report.Run, d *drill.Drill, in *injections) (*drill.Event, error) {
	in.stop()
	var notes []string
	if d != nil && d.Inject == nil {
		notes = append(notes, "no injection, the configuration is the fault: "+d.Flags.String())
	}
	var errs []error
	for _, err := range in.errs {
		switch {
		case errors.Is(err, env.ErrUnsupported):
			notes = append(notes, err.Error())
		case ctx.Err() == nil:
			errs = append(errs, fmt.Errorf("inject the fault: %w", err))
		}
	}
	for _, undo := range in.undo {
		if err := undo(ctx); err != nil && ctx.Err() == nil {
			errs = append(errs, fmt.Errorf("undo the fault: %w", err))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s, %s: %w", run.Fault, run.Strategy, errors.Join(errs...))
	}
	for _, ev := range in.events {
		notes = append(notes, ev.Note)
	}
	run.FaultNote = strings.Join(notes, "; ")
	if len(in.events) == 0 {
		return nil, nil
	}
	return in.events[0], nil
}

type observed struct {
	verdict.Input // its Acked, NoAnswer and SoldOut; readBack adds the rest
	metrics       vegeta.Metrics
	sales         []drill.Sale
	requests      map[string]int // answers (and failures), per sku
	plot          *plot.Plot
}

// classify drains the attack's results until the attack is over, classifying
// every answer: the live tally, run's counts, status codes, sales by replica,
// refusal codes (drills) and error sample, and what the verdict needs.
func classify(a *attack.Attack, run *report.Run, qty int, tr *tracker) *observed {
	obs := &observed{
		Input:    verdict.Input{NoAnswer: map[string]int{}},
		requests: map[string]int{},
		plot: plot.New(plot.Title(fmt.Sprintf("stocklock %s: latency by outcome", run.Strategy)), plot.Label(func(r *vegeta.Result) string {
			cls, _, _ := attack.Interpret(r, 1)
			return string(cls)
		})),
	}
	errSeen := map[string]bool{}
	count := map[verdict.Class]*int{verdict.Sold: &run.Orders, verdict.SoldOut: &run.SoldOut, verdict.Unavailable: &run.Unavailable,
		verdict.Other: &run.Other, verdict.Transport: &run.Transport} // the run's answers by class
	for r := range a.Results {
		obs.metrics.Add(r)
		_ = obs.plot.Add(r) // a plot glitch must not stop the run
		cls, order, note := attack.Interpret(r, qty)
		tr.answer(r, cls, order, note)
		sku := stockclient.SKUOfURL(r.URL)
		run.StatusCodes[fmt.Sprint(r.Code)]++
		obs.requests[sku]++
		*count[cls]++
		switch cls {
		case verdict.Sold:
			obs.Acked = append(obs.Acked, order)
			run.ByReplica[order.Replica]++
			obs.sales = append(obs.sales, drill.Sale{Start: r.Timestamp, End: r.End(), Fence: order.Fence})
			continue
		case verdict.SoldOut:
			obs.SoldOut = append(obs.SoldOut, verdict.SoldOutAnswer{SKU: sku, Qty: qty})
			continue
		}
		// A lost answer (not a refused connection) or a 5xx other than 503
		// (500 outcome_unknown above all) does not say whether the sale
		// happened: it may have sold, as the history check also assumes.
		if cls == verdict.Transport && !attack.Refused(note) || cls == verdict.Other && r.Code >= 500 {
			obs.NoAnswer[sku]++
		}
		if run.Codes != nil {
			run.Codes[answerKind(cls, note)]++
		}
		if len(errSeen) < 5 && !errSeen[note] {
			errSeen[note] = true
			run.ErrorSample = append(run.ErrorSample, note)
		}
	}
	obs.metrics.Close()
	obs.plot.Close()
	return obs
}

// judgeFault records when the fault struck (from began, the attack's start)
// and what it did to the sales: how long they took to resume, and whether
// fencing tokens kept increasing across it (fenced strategies, not the
// deliberately weakened drills).
func judgeFault(run *report.Run, d *drill.Drill, ev *drill.Event, sales []drill.Sale, began time.Time) {
	if ev != nil {
		at := ev.At.Sub(began).Seconds()
		run.Injected, run.DoubleHeld, run.FaultAt = true, ev.DoubleHeld, &at
		if rec, ok := drill.Recovery(sales, ev); ok {
			secs := rec.Seconds()
			run.RecoverySeconds = &secs
		} else {
			run.Problems = append(run.Problems, "sales did not resume after the fault before the attack ended")
		}
	}
	if d != nil && slices.Contains(drill.FencedStrategies, run.Strategy) && !d.Demo {
		// With no injected fault (clock skew) only reuse is checked: two
		// sales under one token would mean two holders with one grant.
		run.Tokens = drill.Tokens(sales, ev)
	}
}

func fillTotals(run *report.Run, obs *observed) {
	m := &obs.metrics
	run.Requests = int(m.Requests)
	run.AttackSeconds = (m.Duration + m.Wait).Seconds()
	run.ReqPerSec = m.Rate
	if len(obs.sales) > 0 {
		last := slices.MaxFunc(obs.sales, func(a, b drill.Sale) int { return a.End.Compare(b.End) })
		run.SellingSeconds = last.End.Sub(m.Earliest).Seconds()
		run.SalesPerSec = salesRate(obs.sales, m.Earliest)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	run.Latency = report.Latency{P50: ms(m.Latencies.P50), P95: ms(m.Latencies.P95), P99: ms(m.Latencies.P99), Max: ms(m.Latencies.Max)}
}

// writePlot writes the run's Vegeta plot to the output directory and
// names it in run; a plot that cannot be written is left out.
func (h *Harness) writePlot(run *report.Run, pl *plot.Plot) {
	name := "plot-" + run.Strategy + ".html"
	f, err := os.Create(filepath.Join(h.outDir, name))
	if err != nil {
		return
	}
	if _, err := pl.WriteTo(f); cmp.Or(err, f.Close()) == nil {
		run.Plot = name
	}
}

// readBack lets stragglers land for the settle time (a response can beat
// its own ledger write only if the service acknowledges before writing,
// which would itself be a finding), waits for pending orders, then reads
// every sku's stock and ledger from the first replica.
func (h *Harness) readBack(ctx context.Context, run *report.Run, since time.Time, obs *observed) (verdict.Input, error) {
	in := obs.Input
	if err := drill.Sleep(ctx, h.cfg.Settle); err != nil {
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
		it, err := h.api.At(reader).GetItem(ctx, sku)
		if err != nil {
			return in, fmt.Errorf("read the stock back: %w", err)
		}
		in.Items = append(in.Items, verdict.Item{SKU: sku, Initial: h.cfg.Stock, Remaining: int(it.Stock)})
		orders, err := ledgerOrders(ctx, h.api.At(reader), sku, since)
		if err != nil {
			return in, fmt.Errorf("read the ledger: %w", err)
		}
		in.Ledger = append(in.Ledger, orders...)
	}
	return in, nil
}

// judge puts the verdict's arithmetic into run, makes the run's safety
// checks (the arithmetic's, the history's, the fencing tokens') and decides
// its verdict from them. The problems the verdict and the history find are
// added to those the run already noted (a fault's sales that did not
// resume, orders still pending), never in their place.
func judge(run *report.Run, in verdict.Input, res verdict.Result) {
	run.Totals, run.LedgerOrders = res.Totals, len(in.Ledger)
	run.Unrecorded, run.DoubleSold, run.DoubleSoldKeys = res.Unrecorded, res.DoubleSold, res.DoubleSoldKeys
	run.Problems = append(run.Problems, res.Problems...)
	lin := history.Verdict(run.Linearizable)
	what := map[bool]string{true: "history not linearizable: ", false: "history's linearizability unknown: "}[lin == history.No]
	for _, c := range run.Conflicts {
		run.Problems = append(run.Problems, what+c)
	}
	if res.Unacknowledged > 0 {
		run.Problems = append(run.Problems, fmt.Sprintf("%d units left the stock without a 200 the harness saw (timeouts or transport errors)", res.Unacknowledged))
	}
	checks := res.Checks()
	if lin != notChecked {
		checks = append(checks, verdict.Check{Name: "linearizable", Observed: run.Linearizable, Bound: "not no", Pass: lin != history.No})
	}
	if tc := run.Tokens; tc != nil {
		checks = append(checks, tc.Check())
		if !tc.OK {
			run.Problems = append(run.Problems, fmt.Sprintf("fencing tokens did not keep increasing across the fault: highest before %d, lowest after %d, %d reused", tc.MaxBefore, tc.MinAfter, tc.Reused))
		}
	}
	run.Checks = verdict.Of(run.Safe, checks...)
	run.Verdict = string(verdict.OutcomeOf(run.Safe, run.Checks))
}

func splitsStock(writers []string) bool {
	return len(writers) > 0 && !slices.ContainsFunc(writers, func(w string) bool {
		in, ok := strategy.Lookup(w)
		return !ok || !in.SplitsStock
	})
}

// ledgerOrders reads sku's ledger since a time through c, all its pages,
// as the verdict's orders.
func ledgerOrders(ctx context.Context, c *stockclient.Client, sku string, since time.Time) ([]verdict.Order, error) {
	orders, err := c.AllOrders(ctx, sku, since)
	if err != nil {
		return nil, err
	}
	out := make([]verdict.Order, 0, len(orders))
	for _, o := range orders {
		out = append(out, verdict.Order{ID: o.ID, SKU: o.SKU, Qty: int(o.Qty), Replica: o.Replica, Strategy: o.Strategy, Key: o.Key})
	}
	return out, nil
}

// shardsOf returns, for a redis-lock comparison run on the env's Redis
// Cluster, the master serving each sku's lock key (by the cluster's own slot
// map); nil for any other run, or noted and nil when it cannot be read.
func (h *Harness) shardsOf(ctx context.Context, name string, skus []string, drilled bool) map[string]string {
	if in, _ := strategy.Lookup(name); drilled || in.Lock != strategy.LockRedis || h.env == nil || h.env.Cluster == nil {
		return nil
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: h.env.Cluster.Addrs, DialTimeout: time.Second})
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out := make(map[string]string, len(skus))
	for _, sku := range skus {
		c, err := cc.MasterForKey(ctx, drill.RedisLockKey(sku))
		if err != nil {
			h.logf("note: no per-shard load: the master of %s: %v", drill.RedisLockKey(sku), err)
			return nil
		}
		out[sku] = c.Options().Addr
	}
	return out
}

// countShards fills run's per-shard load from the skus' masters: skus,
// requests and sales (acknowledged orders) by master.
func countShards(run *report.Run, shards map[string]string, obs *observed) {
	if shards == nil {
		return
	}
	run.SKUsByShard, run.RequestsByShard, run.SalesByShard = map[string]int{}, map[string]int{}, map[string]int{}
	for sku, m := range shards {
		run.SKUsByShard[m]++
		run.RequestsByShard[m] += obs.requests[sku]
		run.SalesByShard[m] += 0 // every master shows, one that sold nothing too
	}
	for _, o := range obs.Acked {
		if m, ok := shards[o.SKU]; ok {
			run.SalesByShard[m]++
		} else {
			run.Problems = append(run.Problems, fmt.Sprintf("a sale of sku %q, which the run did not attack", o.SKU))
		}
	}
}

// startReads reads every sku's stock from the replicas in turn, one GET
// every cfg.ReadEvery (if set), as a client of its own, until the returned
// function is called; each answer is a read in the history. A read without
// an answer changes nothing and is left out.
func (h *Harness) startReads(ctx context.Context, rec *history.Recorder, skus []string) (stop func()) {
	if h.cfg.ReadEvery <= 0 {
		return func() {}
	}
	i := 0
	return ticking(h.cfg.ReadEvery, func(final bool) {
		if final || ctx.Err() != nil {
			return
		}
		base, sku := h.replicas[i%len(h.replicas)], skus[i%len(skus)]
		i++
		client := rec.Acquire()
		call := rec.Now()
		it, err := h.reader.At(base).GetItem(ctx, sku)
		ret := rec.Now()
		rec.Release(client)
		if err == nil {
			rec.Add(history.Op{Client: client, Kind: history.Read, SKU: sku, Target: base, Call: call, Return: ret,
				Outcome: history.OK, Stock: history.Int(int(it.Stock)), Status: 200})
		}
	})
}

// resetStock sets sku's stock with PUT and records it as the history's
// set: the initial stock the checker starts from.
func (h *Harness) resetStock(ctx context.Context, rec *history.Recorder, base, sku string, stock int, opts ...stockclient.CallOption) error {
	client := rec.Acquire()
	defer rec.Release(client)
	call := rec.Now()
	if _, err := h.api.At(base).PutItem(ctx, sku, int64(stock), opts...); err != nil {
		return err
	}
	rec.Add(history.Op{Client: client, Kind: history.Set, SKU: sku, Target: base, Call: call, Return: rec.Now(),
		Outcome: history.OK, Stock: history.Int(stock), Status: 200})
	return nil
}

// checkHistory writes the run's history as name.jsonl in the output
// directory, checks it into run, and draws each violating SKU as
// name[-i].html.
func (h *Harness) checkHistory(run *report.Run, ops []history.Op, name string) (err error) {
	run.History, run.HistoryOps = name+".jsonl", len(ops)
	f, err := os.Create(filepath.Join(h.outDir, run.History))
	if err != nil {
		return fmt.Errorf("history file: %w", err)
	}
	if err := cmp.Or(history.WriteJSONL(f, ops), f.Close()); err != nil {
		return fmt.Errorf("write %s: %w", run.History, err)
	}
	if !h.cfg.Quiet {
		h.logf("  checking the history: %d operations...", len(ops))
	}
	res := history.Check(ops, h.cfg.CheckTimeout)
	run.Linearizable, run.Conflicts, run.CheckSeconds = string(res.Verdict), res.Conflicts(), res.Elapsed.Seconds()
	run.Violations, err = DrawViolations(res, filepath.Join(h.outDir, name))
	return err
}

// DrawViolations writes porcupine's picture of each violating SKU of res
// to stem.html (stem-2.html, ... for more) and returns the file names.
func DrawViolations(res history.Result, stem string) ([]string, error) {
	var names []string
	var errs []error
	for _, s := range res.SKUs {
		path := stem + ".html"
		if len(names) > 0 {
			path = fmt.Sprintf("%s-%d.html", stem, len(names)+1)
		}
		ok, err := s.Visualize(path)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			names = append(names, filepath.Base(path))
		}
	}
	return names, errors.Join(errs...)
}
