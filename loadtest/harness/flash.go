package harness

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stocklock/stocklock/loadtest/drill"
	"github.com/stocklock/stocklock/loadtest/env"
	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/loadtest/verdict"
	"github.com/stocklock/stocklock/pkg/stockclient"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// Flash is the flash sale (loadtest flash, docs/flash.md): far more
// buyers than the service can serve arrive within a few seconds, most of
// them after the last unit. It is an open model: each buyer is a request
// of its own, sent at its arrival whatever the answers before it, with
// its own deadline; no worker cap hides the herd from the service.
type Flash struct {
	Buyers   int
	Over     time.Duration // the buyers arrive over this, as Shape spreads them
	Shape    string        // one of FlashShapes
	Patience time.Duration // a buyer waits this long from its arrival for a final answer
	// Retries is how many times a buyer sends again a shed or unavailable
	// answer (503), after its Retry-After or a backoff, with jitter,
	// within its patience; RetryBudget caps all buyers' retries together,
	// a share of the buyers.
	Retries     int
	RetryBudget float64
	// Conns bounds the connections the buyers share to each replica, as
	// a load balancer's pool to its backends does: a request that finds
	// them all busy waits in the client for one, within its patience
	// and its latency. 0: none, a connection per buyer in flight, each
	// dialled afresh (on one machine, the dialling costs the herd's
	// client and the replicas more than the answers).
	Conns int
	// Keyless sends each decrement without an Idempotency-Key, as the
	// capacity sweep's closed model does: its steps past the knee are
	// compared with the sweep's (a keyed sale is more round trips to the
	// store). Who won can then not be told from the ledger.
	Keyless bool
}

// The arrival shapes.
const (
	ShapeBurst    = "burst"    // most at once: an exponential decay from the start, a quarter of Over its mean
	ShapeRamp     = "ramp"     // a rate rising linearly from 0 to its peak at the end of Over
	ShapeConstant = "constant" // one rate over Over
)

// FlashShapes are the arrival shapes.
var FlashShapes = []string{ShapeBurst, ShapeRamp, ShapeConstant}

// HotSKU are the strategies made to sell one hot sku (docs/hot-sku.md),
// the flash sale's default.
var HotSKU = []string{strategy.Atomic, strategy.Batched, strategy.Buckets, strategy.RedisStock}

const maxFlashBuyers = 200_000

// DefaultFlashConns is Flash.Conns's default: 500 per replica, 1,000 in
// flight through two.
const DefaultFlashConns = 500

// DefaultFlash is loadtest flash's defaults.
func DefaultFlash() *Flash {
	return &Flash{Buyers: 20_000, Over: 4 * time.Second, Shape: ShapeBurst, Patience: 2 * time.Second, RetryBudget: 0.2, Conns: DefaultFlashConns}
}

// Defaults: 100 units, neither the read-modify-write delay nor reads,
// on the hot-sku strategies.
func (Flash) Defaults(c *Config) {
	c.Stock, c.RMWDelay, c.ReadEvery, c.Strategies = 100, 0, 0, slices.Clone(HotSKU)
}

func (Flash) Env(Config, *env.Options) {}

// Check checks the scenario's options, and the thresholds it can judge.
func (f Flash) Check(c Config, bad Problem) {
	between(bad, "Buyers", f.Buyers, 1, maxFlashBuyers)
	between(bad, "Over", f.Over, 0, maxDuration)
	between(bad, "Patience", f.Patience, 10*time.Millisecond, time.Minute)
	if !slices.Contains(FlashShapes, f.Shape) {
		bad("Shape %q: want one of %s", f.Shape, strings.Join(FlashShapes, ", "))
	}
	between(bad, "Retries", f.Retries, 0, 10)
	between(bad, "Conns", f.Conns, 0, maxFlashBuyers)
	if f.RetryBudget < 0 || f.RetryBudget > 10 {
		bad("RetryBudget %g: a share of the buyers, between 0 and 10", f.RetryBudget)
	}
	for _, t := range c.Thresholds {
		if !report.IsFlashMetric(t.Metric) {
			bad("Thresholds %s: %s is not a figure of a flash sale (see the metrics marked loadtest flash)", t, t.Metric)
		}
	}
}

// Arrivals are the times from the start at which n buyers arrive over d
// in shape, in order: each the quantile (i+½)/n of the shape's
// distribution, so that the same settings give the same arrivals.
func Arrivals(shape string, n int, d time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		u := (float64(i) + 0.5) / float64(n)
		var x float64 // the share of d
		switch shape {
		case ShapeBurst: // exponential of mean ¼, truncated at 1
			x = -0.25 * math.Log(1-u*(1-math.Exp(-4)))
		case ShapeRamp: // density 2x
			x = math.Sqrt(u)
		default:
			x = u
		}
		out[i] = time.Duration(x * float64(d))
	}
	return out
}

// Run sells Config.Stock units of each of Config.SKUs to the buyers, one strategy after the other.
func (f Flash) Run(ctx context.Context, h *Harness, rep *report.Report) error {
	rep.Sections = append(rep.Sections, report.FlashSection)
	if err := h.warmup(ctx); err != nil {
		return err
	}
	arrivals := Arrivals(f.Shape, f.Buyers, f.Over)
	api, done := herdClient(f)
	defer done()
	for i, st := range h.cfg.Strategies {
		r := h.newFlashRun(f, api, st, "fl")
		h.logf("[%d/%d] flash, %s: %d buyers over %s (%s), patience %s, retries %d, %d × %d units, %s",
			i+1, len(h.cfg.Strategies), st, f.Buyers, f.Over, f.Shape, f.Patience, f.Retries, h.cfg.SKUs, h.cfg.Stock, report.ConnsText(f.Conns))
		out, err := r.sale(ctx, arrivals)
		if err != nil {
			return fmt.Errorf("flash, %s: %w", st, err)
		}
		sellOut := "no sale answered"
		if out.SellOutSeconds != nil {
			sellOut = "last sale at " + report.Ms(1000**out.SellOutSeconds)
		}
		h.logf("  → %s: sold %d of %d, %s, goodput %.1f/s, %.1f%% answered within patience, first 10%% won %.0f%%; %s",
			st, out.Sold, out.Units, sellOut, out.Goodput, 100*out.AnsweredShare, 100*out.First10,
			map[bool]string{true: "every check passed", false: fmt.Sprintf("not met: %s", strings.Join(verdict.Failures(out.Checks), "; "))}[verdict.Judge(out.Checks) == verdict.Passed])
		rep.Flash = append(rep.Flash, out)
	}
	return nil
}

// herdClient is the buyers' client: at most f.Conns connections to each
// replica (none: every buyer may hold one); done closes its idle
// connections.
func herdClient(f Flash) (api *stockclient.Client, done func()) {
	tr := &http.Transport{Proxy: nil, MaxIdleConns: f.Buyers, MaxIdleConnsPerHost: f.Buyers, MaxConnsPerHost: f.Conns}
	return stockclient.New("", stockclient.WithHTTPClient(&http.Client{Transport: tr}), stockclient.WithTimeout(f.Patience+time.Second)), tr.CloseIdleConnections
}

// newFlashRun is a flash run of strategy on skus of its own, named by tag.
func (h *Harness) newFlashRun(f Flash, api *stockclient.Client, st, tag string) *flashRun {
	h.runNo++
	r := &flashRun{h: h, f: f, api: api, strategy: st, run: h.runNo, buyers: make([]flashBuyer, f.Buyers), kinds: map[string]int64{}}
	r.budget.Store(int64(f.RetryBudget * float64(f.Buyers)))
	for k := range h.cfg.SKUs {
		r.skus = append(r.skus, fmt.Sprintf("%s-%s-%s-%d", h.prefix, tag, st, k))
	}
	return r
}

// flashBuyer is what became of one buyer.
type flashBuyer struct {
	kind     string        // of report.FlashKinds; "" while it waits
	order    verdict.Order // its sale
	latency  time.Duration // from its arrival to its final answer
	lag      time.Duration // from its due arrival to its actual one: the harness's own delay
	answered time.Duration // its final answer, from the first arrival
}

// flashRun is one strategy's flash sale.
type flashRun struct {
	h        *Harness
	f        Flash
	api      *stockclient.Client
	strategy string
	run      int
	skus     []string
	began    time.Time
	buyers   []flashBuyer // each written by its own buyer only

	arrived, attempts, retried, sold atomic.Int64
	budget                           atomic.Int64 // retries left to all buyers
	mu                               sync.Mutex
	kinds                            map[string]int64 // final answers so far, as Progress words them
	bins, binsSent                   [][6]int64       // final answers by answerBin and report.FlashKinds; those emitted
}

// The flash sale's events, for the live page, besides a run-start and
// its progress.
const (
	EventAnswers = "answers"  // Run, Strategy, Bin: final answers by kind newly counted in one bin of answerBin
	EventSellOut = "sell-out" // Run, Strategy, Progress: the sale that sold the last unit was answered

	answerBin = 100 * time.Millisecond
)

// AnswerBin is what EventAnswers adds to one bin: final answers counted
// since the bin's previous event, by report.FlashKinds, the bin Start
// seconds from the first arrival and Width wide. A bin may have several
// events (answers counted after its first one): add them up.
type AnswerBin struct {
	Start float64          `json:"start"`
	Width float64          `json:"width"`
	Kinds map[string]int64 `json:"kinds"`
}

// emitBins emits the answers counted since the previous call, an event
// per bin that has any.
func (r *flashRun) emitBins() {
	r.mu.Lock()
	var evs []Event
	for i := range r.bins {
		if r.bins[i] == r.binsSent[i] {
			continue
		}
		b := &AnswerBin{Start: float64(i) * answerBin.Seconds(), Width: answerBin.Seconds(), Kinds: map[string]int64{}}
		for k, n := range r.bins[i] {
			if d := n - r.binsSent[i][k]; d > 0 {
				b.Kinds[report.FlashKinds[k]] = d
			}
		}
		r.binsSent[i] = r.bins[i]
		evs = append(evs, Event{Type: EventAnswers, Run: r.run, Strategy: r.strategy, Bin: b})
	}
	r.mu.Unlock()
	for _, ev := range evs {
		r.h.emit(ev)
	}
}

// flashKind is the kind of an answer (report.FlashKinds); late says
// whether the buyer's patience ran out.
func flashKind(err error, late bool) string {
	var e *stockclient.Error
	switch {
	case err == nil:
		return report.KindSale
	case errors.As(err, &e) && errors.Is(err, stockclient.ErrSoldOut):
		return report.KindSoldOut
	case errors.As(err, &e) && e.Status == http.StatusServiceUnavailable && e.Code == "overloaded":
		return report.KindShed
	case errors.As(err, &e) && e.Status == http.StatusServiceUnavailable:
		return report.KindUnavailable
	case late:
		return report.KindTimedOut
	}
	return report.KindError
}

// buy is buyer i, due at due and arrived now: one decrement, through the replicas in
// turn from its own, sent again while the answer is a 503, the retries
// and their budget allow, and its patience lasts.
func (r *flashRun) buy(ctx context.Context, i int, due time.Time) {
	arrived := time.Now()
	r.buyers[i].lag = arrived.Sub(due)
	r.arrived.Add(1)
	bctx, cancel := context.WithDeadline(ctx, arrived.Add(r.f.Patience))
	defer cancel()
	sku := r.skus[i%len(r.skus)]
	var opts []stockclient.CallOption
	if !r.f.Keyless {
		opts = append(opts, stockclient.IdempotencyKey(fmt.Sprintf("%s-b%d", sku, i)))
	}
	b := &r.buyers[i]
	for try := 0; ; try++ {
		base := r.h.replicas[(i+try)%len(r.h.replicas)]
		r.attempts.Add(1)
		sale, err := r.api.At(base).Decrement(bctx, sku, int64(r.h.cfg.Qty), r.strategy, opts...)
		b.kind = flashKind(err, bctx.Err() != nil)
		if err == nil {
			b.order = verdict.Order{ID: sale.OrderID, SKU: sku, Qty: r.h.cfg.Qty}
			q, units := int64(r.h.cfg.Qty), int64(r.h.cfg.Stock*len(r.skus))
			if n := r.sold.Add(q); n >= units && n-q < units { // this sale sold the last unit
				r.h.emit(Event{Type: EventSellOut, Run: r.run, Strategy: r.strategy, Progress: r.progress(false)})
			}
		}
		// A retry takes one of the budget's, kept even if the buyer then gives up.
		if b.kind != report.KindShed && b.kind != report.KindUnavailable || try >= r.f.Retries || r.budget.Add(-1) < 0 {
			break
		}
		wait := retryWait(err, try)
		if time.Until(arrived.Add(r.f.Patience)) < wait || drill.Sleep(bctx, wait) != nil {
			break // the buyer gives up: the last answer stands
		}
		r.retried.Add(1)
	}
	b.latency, b.answered = time.Since(arrived), time.Since(r.began)
	bin := int(b.answered / answerBin)
	r.mu.Lock()
	r.kinds[progressKind[b.kind]]++
	for len(r.bins) <= bin {
		r.bins, r.binsSent = append(r.bins, [6]int64{}), append(r.binsSent, [6]int64{})
	}
	r.bins[bin][slices.Index(report.FlashKinds, b.kind)]++
	r.mu.Unlock()
}

// progressKind words a final answer's kind as Progress.Answers does.
var progressKind = map[string]string{report.KindSale: "sold", report.KindSoldOut: "sold out", report.KindShed: "503 overloaded",
	report.KindUnavailable: "503 unavailable", report.KindTimedOut: "no answer: timed out", report.KindError: "error"}

// retryWait is how long a buyer waits before its retry after err, the
// try-th: at least the answer's Retry-After, and up to half as long
// again; without one, a backoff from 50ms doubling, jittered ±50%.
func retryWait(err error, try int) time.Duration {
	if ra, ok := stockclient.RetryAfter(err); ok && ra > 0 {
		return ra + rand.N(ra/2+1)
	}
	backoff := 50 * time.Millisecond << min(try, 6)
	return backoff/2 + rand.N(backoff)
}

// sale resets the stock, lets the herd in, watches the control plane
// while it lasts, and judges the books once every buyer is answered.
func (r *flashRun) sale(ctx context.Context, arrivals []time.Duration) (report.FlashRun, error) {
	cfg, f := r.h.cfg, r.f
	out := report.FlashRun{Strategy: r.strategy, Safe: strategy.IsSafe(r.strategy), Shape: f.Shape, Buyers: f.Buyers, Over: f.Over.String(),
		Patience: f.Patience.String(), Retries: f.Retries, RetryBudget: f.RetryBudget, Qty: cfg.Qty, SKUs: cfg.SKUs, Units: cfg.Stock * cfg.SKUs, Conns: f.Conns}
	var opts []stockclient.CallOption
	if splitsStock([]string{r.strategy}) {
		opts = append(opts, stockclient.SplitStock())
	}
	for _, sku := range r.skus {
		if _, err := r.h.api.At(r.h.replicas[0]).PutItem(ctx, sku, int64(cfg.Stock), opts...); err != nil {
			return out, fmt.Errorf("set the stock of %s: %w", sku, err)
		}
	}
	r.h.emit(Event{Type: EventRunStart, Run: r.run, Strategy: r.strategy, SKUs: r.skus, Initial: out.Units, Replicas: r.h.replicaIDs})
	before, logs := scrape(ctx, r.h, parseFlashMetrics), r.replicaLogs()
	logged := logSizes(logs)
	r.began = time.Now()
	herd := arrivals[len(arrivals)-1] + f.Patience
	stopProgress := ticking(progressGap, func(final bool) {
		r.h.emit(Event{Type: EventProgress, Run: r.run, Strategy: r.strategy, Progress: r.progress(final)})
	})
	stopBins := ticking(answerBin, func(bool) { r.emitBins() })
	control := r.watch(ctx, r.began.Add(herd))
	var wg sync.WaitGroup
	for i, at := range arrivals {
		if drill.Sleep(ctx, time.Until(r.began.Add(at))) != nil {
			break
		}
		wg.Go(func() { r.buy(ctx, i, r.began.Add(at)) })
	}
	wg.Wait()
	stopBins() // its final call emits the last answers
	stopProgress()
	out.Control = <-control
	if err := ctx.Err(); err != nil {
		return out, context.Cause(ctx)
	}
	after := scrape(ctx, r.h, parseFlashMetrics)
	shedBefore, shedAfter := make([]histSnapshot, len(before)), make([]histSnapshot, len(after))
	for i := range after {
		out.Control.RenewalFailures += after[i].control[0] - before[i].control[0]
		out.Control.LeasesLost += after[i].control[1] - before[i].control[1]
		out.Control.RecoveredOrders += after[i].control[2] - before[i].control[2]
		shedBefore[i], shedAfter[i] = before[i].shedTimes, after[i].shedTimes
		for reason, n := range after[i].shedReasons {
			if d := int(n - before[i].shedReasons[reason]); d > 0 {
				if out.ShedReasons == nil {
					out.ShedReasons = map[string]int{}
				}
				out.ShedReasons[reason] += d
			}
		}
	}
	countLogged(logs, logged, &out.Control)
	if p99, ok := p99Ms(shedBefore, shedAfter, ""); ok {
		out.ReplicaShedP99 = &p99
	}
	r.tally(&out)
	if _, err := r.h.waitDrained(ctx, r.h.replicas[0], r.skus); err != nil {
		return out, err
	}
	return out, r.books(ctx, &out)
}

// progress is the sale's state now, as the terminal and the live page show it.
func (r *flashRun) progress(final bool) *Progress {
	p := &Progress{Elapsed: time.Since(r.began).Seconds(), Sent: r.arrived.Load(), Sold: r.sold.Load(), Final: final}
	r.mu.Lock()
	p.Answers = make(map[string]int64, len(r.kinds))
	for k, n := range r.kinds {
		p.Answers[k] = n
		p.Answered += n
	}
	r.mu.Unlock()
	initial := int64(r.h.cfg.Stock * len(r.skus))
	p.Remaining, p.Oversold = initial-p.Sold, max(0, p.Sold-initial)
	return p
}

// flashMetrics is what a flash run reads from one replica's /metrics,
// before the herd and after it.
type flashMetrics struct {
	control     [3]float64         // lock renewal failures, leases lost, recovered orders
	shedTimes   histSnapshot       // stock_sales_shed_seconds, under ""
	shedReasons map[string]float64 // stock_sales_shed_total, by reason
}

// parseFlashMetrics reads a replica's /metrics for a flash run.
func parseFlashMetrics(text []byte) flashMetrics {
	fams := families(text)
	out := flashMetrics{shedTimes: parseShedTimes(text), shedReasons: map[string]float64{}}
	for i, name := range []string{"stock_lock_renewal_failures_total", "stock_leases_lost_total", "stock_recovered_orders_total"} {
		for _, m := range fams[name].GetMetric() {
			out.control[i] += m.GetCounter().GetValue()
		}
	}
	for _, m := range fams["stock_sales_shed_total"].GetMetric() {
		out.shedReasons[label(m, "reason")] += m.GetCounter().GetValue()
	}
	return out
}

// replicaLogs are the paths of the replicas' logs, when the harness started them.
func (r *flashRun) replicaLogs() []string {
	var out []string
	for i := range r.h.replicas {
		if r.h.env != nil && i < r.h.env.Len() {
			out = append(out, filepath.Join(r.h.outDir, "replica-"+r.h.env.ID(i)+".log"))
		}
	}
	return out
}

// logSizes are the sizes of the files at paths now (0 for one missing).
func logSizes(paths []string) []int64 {
	out := make([]int64, len(paths))
	for i, p := range paths {
		if st, err := os.Stat(p); err == nil {
			out[i] = st.Size()
		}
	}
	return out
}

// countLogged counts what the replicas logged past the offsets from
// that the control plane's troubles are: heartbeats that failed, recovery
// passes that failed, replicas taken for dead.
func countLogged(paths []string, from []int64, c *report.FlashControl) {
	c.Logged = len(paths) > 0
	for i, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil || int64(len(b)) < from[i] {
			continue
		}
		text := string(b[from[i]:])
		c.HeartbeatMisses += strings.Count(text, `"msg":"heartbeat failed`)
		c.RecoveryFailures += strings.Count(text, `"msg":"recovery of `)
		c.DeadFound += strings.Count(text, `"msg":"found replicas dead`)
	}
}

// tally sums the buyers' final answers and their times.
func (r *flashRun) tally(out *report.FlashRun) {
	lat := map[string][]float64{}
	var lags []float64
	out.BinSeconds = max(0.05, (r.f.Over+r.f.Patience).Seconds()/80)
	var lastGood, lastSale time.Duration
	good := 0
	for _, b := range r.buyers {
		kind := b.kind
		if kind == "" { // never sent: the run was cut short
			continue
		}
		lat[kind] = append(lat[kind], float64(b.latency.Microseconds())/1000)
		lags = append(lags, float64(b.lag.Microseconds())/1000)
		bin := int(b.answered.Seconds() / out.BinSeconds)
		for len(out.Timeline) <= bin {
			out.Timeline = append(out.Timeline, [6]int{})
		}
		out.Timeline[bin][slices.Index(report.FlashKinds, kind)]++
		if kind == report.KindSale {
			out.Sold += b.order.Qty
			lastSale = max(lastSale, b.answered)
			if b.latency <= r.f.Patience {
				good++
				lastGood = max(lastGood, b.answered)
			}
		}
	}
	for _, k := range report.FlashKinds {
		v := lat[k]
		slices.Sort(v)
		out.Kinds = append(out.Kinds, report.FlashKind{Kind: k, Buyers: len(v),
			Latency: report.FlashLatency{P50: quantile(v, 0.5), P90: quantile(v, 0.9), P99: quantile(v, 0.99), Max: quantile(v, 1)}})
	}
	if out.Sold > 0 {
		s := lastSale.Seconds()
		out.SellOutSeconds = &s
	}
	if good > 0 && lastGood > 0 {
		out.Goodput = float64(good) / lastGood.Seconds()
	}
	slices.Sort(lags)
	out.DispatchLagP99 = quantile(lags, 0.99)
	out.AnsweredShare = 1 - float64(out.Kind(report.KindTimedOut).Buyers)/float64(len(r.buyers))
	out.Attempts, out.Retried = int(r.attempts.Load()), int(r.retried.Load())
}

// books reads the stock and the ledger back and judges the run: nothing
// oversold, the ledger exactly the sales answered (and those whose answer
// came too late), every buyer one final answer, and the thresholds.
func (r *flashRun) books(ctx context.Context, out *report.FlashRun) error {
	b, err := booksOf(ctx, r.h.api.At(r.h.replicas[0]), r.skus)
	if err != nil {
		return err
	}
	var acked []verdict.Order
	unanswered := 0
	for _, by := range r.buyers {
		switch by.kind {
		case report.KindSale:
			acked = append(acked, by.order)
		case report.KindTimedOut, report.KindError:
			unanswered++ // may have sold without the buyer learning it
		}
	}
	led := verdict.CompareLedger(acked, b.orders)
	led.Unanswered = min(led.Extra, unanswered)
	for _, o := range b.orders {
		out.LedgerUnits += o.Qty
	}
	out.Remaining = b.left
	// Who won, by the ledger: a unit went to its buyer whether or not
	// the answer came within patience.
	won := map[int]int{}
	for _, o := range b.orders {
		if k := strings.LastIndex(o.Key, "-b"); k >= 0 {
			if i, err := strconv.Atoi(o.Key[k+2:]); err == nil && i < len(r.buyers) {
				won[i] += o.Qty
			}
		}
	}
	out.First1, out.First10, out.Won = report.Fairness(len(r.buyers), won)
	double, _ := verdict.DoubleSold(b.orders)
	finals := 0
	for _, by := range r.buyers {
		finals += map[bool]int{true: 1}[slices.Contains(report.FlashKinds, by.kind)]
	}
	out.Checks = verdict.Of(out.Safe,
		verdict.Zero("oversold", max(0, out.Sold-out.Units, out.LedgerUnits-out.Units)),
		verdict.Zero("ledger_mismatch", led.Total()),
		verdict.Equal("available_plus_sold", b.left+b.held+out.LedgerUnits, out.Units),
		verdict.Zero("pending", b.pending),
		verdict.Zero("double_sold", double),
		verdict.Equal("buyers_with_one_final_answer", finals, len(r.buyers)))
	for _, t := range r.h.cfg.Thresholds {
		if c, ok := t.CheckFlash(*out); ok {
			out.Checks = append(out.Checks, c)
		}
	}
	return nil
}
