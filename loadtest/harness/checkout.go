package harness

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stocklock/stocklock/loadtest/drill"
	"github.com/stocklock/stocklock/loadtest/env"
	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/loadtest/verdict"
	"github.com/stocklock/stocklock/pkg/stockclient"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// Checkout is the checkout scenario (loadtest checkout, see
// docs/holds.md): buyers arrive at Config.Rate for Config.Duration on one
// sku per strategy, every other one a plain decrement, the others a hold
// that they abandon, confirm after Think, or confirm late on purpose;
// probes measure how soon an expired hold's unit sells again; the Faults
// strike in turn during each strategy's run.
type Checkout struct {
	Abandon float64       // share of the holding buyers who never confirm
	Late    float64       // share who confirm only once a read of the hold says it expired
	Think   time.Duration // from a hold's answer to its confirm
	HoldTTL time.Duration // the holds' time to live
	Probes  int           // expiry probes per strategy
	Faults  []string      // of CheckoutFaults
}

// DefaultCheckout is loadtest checkout's defaults.
func DefaultCheckout() *Checkout {
	return &Checkout{Abandon: 0.5, Late: 0.1, Think: 300 * time.Millisecond, HoldTTL: 2 * time.Second, Probes: 20}
}

// Defaults: buyers at 20/s, on the strategies that take part in holds.
func (Checkout) Defaults(c *Config) {
	c.Rate, c.Strategies = 20, strategy.NamesOf(func(in strategy.Info) bool { return in.Holds })
}

// Env puts the replicas behind proxies when a fault cuts them off.
func (s Checkout) Env(_ Config, o *env.Options) {
	o.Network = o.Network || slices.Contains(s.Faults, drill.StorePartition)
}

// Run runs the scenario on every strategy of the config that takes part in holds.
func (co Checkout) Run(ctx context.Context, h *Harness, rep *report.Report) error {
	rep.Sections = append(rep.Sections, report.CheckoutSection)
	holding := strategy.NamesOf(func(in strategy.Info) bool { return in.Holds })
	holds := func(s string) bool { return slices.Contains(holding, s) }
	strategies := slices.DeleteFunc(slices.Clone(h.cfg.Strategies), func(s string) bool { return !holds(s) })
	if len(strategies) == 0 {
		return errors.New("checkout: no strategy among --strategies takes part in holds")
	}
	if skipped := slices.DeleteFunc(slices.Clone(h.cfg.Strategies), holds); len(skipped) > 0 {
		h.logf("checkout: %s take no part in holds (docs/holds.md): skipped", strings.Join(skipped, ", "))
	}
	if len(co.Faults) > 0 && (h.env == nil || h.env.Len() < 2) {
		return errors.New("checkout faults need two replicas the harness starts")
	}
	if err := h.warmup(ctx); err != nil {
		return err
	}
	// Each attempt may wait out a stopped replica.
	api := stockclient.New("", stockclient.WithHTTPClient(&http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64}}),
		stockclient.WithTimeout(max(h.cfg.Timeout, 2*co.HoldTTL+5*time.Second)), stockclient.WithAdminToken(h.cfg.AdminToken))
	for _, st := range strategies {
		h.runNo++
		r := &checkoutRun{h: h, api: api, co: co, strategy: st, run: h.runNo, sku: fmt.Sprintf("%s-co-%s", h.prefix, st),
			thinking: map[int]int{}, inflight: map[*holdRec]int{}, latency: map[string][]float64{}, sales: map[string][]drill.Sale{}}
		h.logf("checkout, %s: %d buyers/s for %s, hold TTL %s, think %s, abandon %g, late %g, faults %q",
			st, h.cfg.Rate, h.cfg.Duration, co.HoldTTL, co.Think, co.Abandon, co.Late, co.Faults)
		out, err := r.runOnce(ctx)
		if err != nil {
			return fmt.Errorf("checkout, %s: %w", st, err)
		}
		h.logf("  → %s: sales/s checkout %.1f, plain %.1f; expiry to sellable p99 %s; %s", st, out.CheckoutSalesPerSec, out.PlainSalesPerSec,
			report.Ms(out.ExpiryP99), map[bool]string{true: "every check passed", false: fmt.Sprintf("FAILED: %v", verdict.Failures(out.Checks))}[verdict.Judge(out.Checks) == verdict.Passed])
		rep.Checkout = append(rep.Checkout, out)
	}
	return nil
}

// CheckoutFaults are the faults the checkout scenario strikes, by the
// catalogue's names: kill -9 of a replica whose buyers hold and have not
// confirmed, SIGSTOP of a replica with confirms in flight past their
// holds' expiry, a replica cut off from MongoDB.
var CheckoutFaults = []string{drill.Crash, drill.Pause, drill.StorePartition}

// Shapes of the checkout scenario.
const (
	expiryLimit    = 50 * time.Millisecond // the expiry-to-sellable p99 a run should stay within
	checkoutGiveUp = time.Minute           // a call stops trying other replicas after this
	checkoutDown   = time.Second           // a killed replica restarts after this
	checkoutCut    = 3 * time.Second       // a partition from MongoDB lasts this
	returnWait     = 20 * time.Second      // for the recovery pass to return expired units (every 5s)
)

// ParseCheckoutFaults reads a comma-separated list of CheckoutFaults, all or none.
func ParseCheckoutFaults(s string) ([]string, error) {
	switch s = strings.TrimSpace(s); s {
	case "", "none":
		return nil, nil
	case "all":
		return slices.Clone(CheckoutFaults), nil
	}
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); !slices.Contains(CheckoutFaults, f) {
			return nil, fmt.Errorf("%q is not a checkout fault (%s, all or none)", f, strings.Join(CheckoutFaults, ", "))
		} else if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

// Check checks the scenario's options, and the shared settings it needs.
func (co Checkout) Check(c Config, bad Problem) {
	if co.Abandon < 0 || co.Late < 0 || co.Abandon+co.Late > 1 {
		bad("Abandon %g and Late %g: shares of the holding buyers, each at least 0 and together at most 1", co.Abandon, co.Late)
	}
	if co.HoldTTL < time.Second || co.HoldTTL > time.Minute || co.HoldTTL%time.Millisecond != 0 {
		bad("HoldTTL %s: must be whole milliseconds from 1s (the service's least) to 1m", co.HoldTTL)
	}
	if co.Think < 0 || co.Think >= co.HoldTTL {
		bad("Think %s: must be at least 0 and below HoldTTL (%s)", co.Think, co.HoldTTL)
	}
	if c.Qty != 1 || c.SKUs != 1 {
		bad("Qty %d and SKUs %d: a checkout buyer buys one unit of the one sku of its strategy", c.Qty, c.SKUs)
	}
	if c.Rate < 1 {
		bad("Rate %d: checkout buyers arrive at a rate, at least 1 a second", c.Rate)
	}
	between(bad, "Probes", co.Probes, 1, 1000)
	for _, f := range co.Faults {
		if !slices.Contains(CheckoutFaults, f) {
			bad("Faults %q: not a checkout fault (%s)", f, strings.Join(CheckoutFaults, ", "))
		}
	}
	if len(co.Faults) > 0 && (len(c.Replicas) > 0 || c.LocalReplicas < 2) {
		bad("faults %s need at least two replicas the harness starts (it kills, stops and cuts them off): drop Replicas", strings.Join(co.Faults, ","))
	}
}

// buyerKind is what checkout buyer j does: the golden-ratio sequence
// spreads the abandon and late shares evenly over the buyers.
func buyerKind(j int, abandon, late float64) string {
	x := math.Mod(float64(j)*0.6180339887498949, 1)
	switch {
	case x < abandon:
		return "abandon"
	case x < abandon+late:
		return "late"
	}
	return "in time"
}

// holdRec is one hold and what became of it (under checkoutRun.mu).
type holdRec struct {
	id, sku     string
	readExpired bool // a read (or a probe's sale) found it expired
	sold        bool // a confirm of it answered 200
}

// checkoutRun is one strategy's run of the scenario.
type checkoutRun struct {
	h        *Harness
	api      *stockclient.Client
	co       Checkout
	strategy string
	run      int
	sku      string

	mu       sync.Mutex
	out      report.CheckoutRun
	holds    []*holdRec
	thinking map[int]int          // buyers who hold on a replica and have not confirmed
	inflight map[*holdRec]int     // confirms in flight, by replica
	latency  map[string][]float64 // ms, by call: hold, confirm, decrement
	sales    map[string][]drill.Sale
	acked    []string // order ids of the sales answered 200
	probes   []float64
	lastHold time.Time
}

func (r *checkoutRun) emit(typ string, rec *holdRec, replica int, text string) {
	ev := Event{Type: typ, Run: r.run, Strategy: r.strategy, SKU: rec.sku, Hold: rec.id, Text: text}
	if replica >= 0 {
		ev.Replica = r.h.ids[r.h.replicas[replica]]
	}
	r.h.emit(ev)
}

func (r *checkoutRun) locked(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
}

// count adds one to an answer's tally.
func (r *checkoutRun) count(what string, err error) {
	if a := answerOf(err); a != "" {
		what += " " + a
	}
	r.locked(func() { r.out.Answers[what]++ })
}

// measured tallies the answer to a call sent since as what, and its latency and sale.
func (r *checkoutRun) measured(call, what string, since time.Time, err error, orderID string) {
	r.count(what, err)
	r.locked(func() {
		r.latency[call] = append(r.latency[call], float64(time.Since(since).Microseconds())/1000)
		if err == nil && call != "hold" {
			r.sales[call] = append(r.sales[call], drill.Sale{End: time.Now()})
			r.acked = append(r.acked, orderID)
		}
	})
}

// across sends a POST to route to the replicas in turn, from first, until
// the answer is final (stockclient.Retryable) or checkoutGiveUp passes.
// Every call but a confirm carries an Idempotency-Key.
func across[T any](ctx context.Context, r *checkoutRun, first int, route string, send func(*stockclient.Client, int) (T, error)) (v T, err error) {
	call := stockclient.Call{Method: http.MethodPost, Route: route, Keyed: route != stockclient.RouteConfirm}
	inTurn(ctx, len(r.h.replicas), first, 50*time.Millisecond, checkoutGiveUp, func(i int) bool {
		v, err = send(r.api.At(r.h.replicas[i]), i)
		return err == nil || !stockclient.Retryable(call, err)
	})
	return v, err
}

// hold creates a hold of one unit of sku through replica first.
func (r *checkoutRun) hold(ctx context.Context, sku string, first int, key string) (*holdRec, int, error) {
	replica := first
	hl, err := across(ctx, r, first, stockclient.RouteHolds, func(c *stockclient.Client, i int) (stockclient.Hold, error) {
		replica = i
		return c.CreateHold(ctx, sku, 1, r.co.HoldTTL, r.strategy, stockclient.IdempotencyKey(key))
	})
	if err != nil {
		return nil, replica, err
	}
	rec := &holdRec{id: hl.ID, sku: sku}
	r.locked(func() { r.holds, r.lastHold = append(r.holds, rec), time.Now() })
	r.emit(EventHeld, rec, replica, "")
	return rec, replica, nil
}

// decrement sells one unit of sku through replica first.
func (r *checkoutRun) decrement(ctx context.Context, sku string, first int, key string) (stockclient.Sale, error) {
	return across(ctx, r, first, stockclient.RouteDecrement, func(c *stockclient.Client, _ int) (stockclient.Sale, error) {
		return c.Decrement(ctx, sku, 1, r.strategy, stockclient.IdempotencyKey(key))
	})
}

// readExpired reads rec through replica until the store says it expired, for up to patience.
func (r *checkoutRun) readExpired(ctx context.Context, rec *holdRec, replica int, patience time.Duration) bool {
	expired := false
	poll(ctx, patience, 20*time.Millisecond, func() bool {
		hl, err := r.api.At(r.h.replicas[replica]).GetHold(ctx, rec.sku, rec.id)
		expired = err == nil && hl.State == "expired"
		return err == nil && hl.State != "held"
	})
	if expired {
		r.locked(func() { rec.readExpired = true })
		r.emit(EventExpired, rec, -1, "read")
	}
	return expired
}

// buyer is buyer i: a plain decrement when i is odd, else a hold; each
// kind through the replicas in turn.
func (r *checkoutRun) buyer(ctx context.Context, i int) {
	first, key := i/2%len(r.h.replicas), fmt.Sprintf("%s-b%d", r.sku, i)
	start := time.Now()
	if i%2 == 1 {
		sale, err := r.decrement(ctx, r.sku, first, key)
		r.measured("decrement", "decrement", start, err, sale.OrderID)
		return
	}
	kind := buyerKind(i/2, r.co.Abandon, r.co.Late)
	rec, replica, err := r.hold(ctx, r.sku, first, key)
	r.measured("hold", "hold", start, err, "")
	if err != nil {
		return
	}
	switch kind {
	case "abandon":
		r.count("abandoned", nil)
		return
	case "late":
		if drill.Sleep(ctx, r.co.HoldTTL) != nil || !r.readExpired(ctx, rec, replica, checkoutGiveUp) {
			r.count("late, never read expired", nil)
			return
		}
	default:
		r.locked(func() { r.thinking[replica]++ })
		_ = drill.Sleep(ctx, r.co.Think)
		r.locked(func() { r.thinking[replica]-- })
	}
	start = time.Now()
	sale, err := across(ctx, r, replica, stockclient.RouteConfirm, func(c *stockclient.Client, i int) (stockclient.Sale, error) {
		r.locked(func() { r.inflight[rec] = i })
		defer r.locked(func() { delete(r.inflight, rec) })
		return c.ConfirmHold(ctx, rec.sku, rec.id)
	})
	r.measured("confirm", "confirm "+kind, start, err, sale.OrderID)
	r.locked(func() { rec.sold = err == nil })
	switch {
	case err == nil:
		r.emit(EventConfirmed, rec, replica, "")
	case errors.Is(err, stockclient.ErrHoldExpired):
		r.emit(EventLateRefused, rec, replica, err.Error())
	}
}

// probe holds the one unit of sku, and from the earliest moment the hold
// can expire (the create's sending + the TTL, on this process's monotonic
// clock) buys it through another replica until a sale goes through: the
// time from that moment to the sale's answer, in ms, or NaN if none came.
func (r *checkoutRun) probe(ctx context.Context, i int, sku string) float64 {
	sent := time.Now()
	rec, replica, err := r.hold(ctx, sku, i%len(r.h.replicas), sku)
	if err != nil {
		r.count("probe hold", err)
		return math.NaN()
	}
	expiry := sent.Add(r.co.HoldTTL)
	if drill.Sleep(ctx, time.Until(expiry)) != nil {
		return math.NaN()
	}
	for n := 0; time.Since(expiry) < 5*time.Second; n++ {
		sale, err := r.decrement(ctx, sku, (replica+1)%len(r.h.replicas), fmt.Sprintf("%s-s%d", sku, n))
		if err == nil {
			ms := float64(time.Since(expiry).Microseconds()) / 1000
			r.locked(func() { rec.readExpired, r.acked = true, append(r.acked, sale.OrderID) })
			r.emit(EventExpired, rec, -1, "sold again")
			return ms
		}
		if !errors.Is(err, stockclient.ErrSoldOut) && drill.Sleep(ctx, 10*time.Millisecond) != nil {
			break
		}
	}
	return math.NaN()
}

// runOnce runs the buyers, the probes and the faults, then waits for
// every hold to expire and its units to return, and checks the books.
func (r *checkoutRun) runOnce(ctx context.Context) (report.CheckoutRun, error) {
	cfg := r.h.cfg
	r.out = report.CheckoutRun{Strategy: r.strategy, HoldTTL: r.co.HoldTTL.String(), Think: r.co.Think.String(), Abandon: r.co.Abandon, Late: r.co.Late,
		Faults: r.co.Faults, Initial: cfg.Stock, Answers: map[string]int{}}
	skus := []string{r.sku}
	for i := range r.co.Probes {
		skus = append(skus, fmt.Sprintf("%s-p%d", r.sku, i))
	}
	for i, sku := range skus {
		stock := map[bool]int{true: cfg.Stock, false: 1}[i == 0] // a probe's is 1
		if _, err := r.api.At(r.h.replicas[0]).PutItem(ctx, sku, int64(stock)); err != nil {
			return r.out, fmt.Errorf("set the stock of %s: %w", sku, err)
		}
	}
	began := time.Now()
	faultsDone, buyersDone := make(chan struct{}), make(chan struct{})
	go func() {
		// The scenario's faults at their times, and those asked for with Inject while the
		// buyers arrive, one at a time, the victims taking turns.
		defer close(faultsDone)
		run := func(f string, turn int, strike func(context.Context, string, int) (string, error), planned bool) {
			at := time.Since(began)
			note, err := strike(ctx, f, turn)
			if err != nil {
				note = fmt.Sprintf("%s failed: %v", f, err)
				r.out.FaultFailed = r.out.FaultFailed || planned
			}
			r.out.FaultNotes = append(r.out.FaultNotes, fmt.Sprintf("%5.1fs to %.1fs: %s", at.Seconds(), time.Since(began).Seconds(), note))
			r.h.logf("  %s", r.out.FaultNotes[len(r.out.FaultNotes)-1])
		}
		r.h.setActive(true)
		adhoc := r.h.adhoc
		for k, turn := 0, 0; ; turn++ {
			var due <-chan time.Time
			if k < len(r.co.Faults) {
				due = time.After(time.Until(began.Add(cfg.Duration * time.Duration(k+1) / time.Duration(len(r.co.Faults)+1))))
			} else if adhoc == nil {
				return
			}
			select {
			case <-due:
				run(r.co.Faults[k], turn, r.strike, true)
				k++
			case name := <-adhoc:
				run(name, turn, r.adhoc, false)
			case <-buyersDone: // no more Inject; the planned faults still strike
				r.h.setActive(false)
				adhoc, buyersDone = nil, nil
			case <-ctx.Done():
				r.h.setActive(false)
				return
			}
		}
	}()
	var wg sync.WaitGroup
	r.probes = make([]float64, r.co.Probes)
	wg.Go(func() {
		paced(ctx, &wg, began, cfg.Duration, r.co.Probes, func(p int) { r.probes[p] = r.probe(ctx, p, skus[1+p]) })
	})
	paced(ctx, &wg, began, cfg.Duration, max(1, int(cfg.Duration.Seconds()*float64(cfg.Rate))), func(i int) { r.buyer(ctx, i) })
	wg.Wait()
	close(buyersDone)
	<-faultsDone
	if err := ctx.Err(); err != nil {
		return r.out, context.Cause(ctx)
	}
	r.tally(began)
	// Every hold expired, its units returned, every order recorded.
	if err := drill.Sleep(ctx, time.Until(r.lastHold.Add(r.co.HoldTTL))); err != nil {
		return r.out, err
	}
	if _, err := r.h.waitDrained(ctx, r.h.replicas[0], skus); err != nil {
		return r.out, err
	}
	return r.out, r.books(ctx, skus)
}

// tally sums the buyers' answers and times.
func (r *checkoutRun) tally(began time.Time) {
	o := &r.out
	probes := slices.DeleteFunc(slices.Clone(r.probes), math.IsNaN)
	slices.Sort(probes)
	o.Probes, o.ProbesSold = len(r.probes), len(probes)
	o.ExpiryP50, o.ExpiryP99 = quantile(probes, 0.5), quantile(probes, 0.99)
	lat := func(call string, q float64) float64 {
		return quantile(slices.Sorted(slices.Values(r.latency[call])), q)
	}
	o.HoldP99, o.ConfirmP50, o.ConfirmP99, o.DecrementP50, o.DecrementP99 = lat("hold", 0.99), lat("confirm", 0.5), lat("confirm", 0.99), lat("decrement", 0.5), lat("decrement", 0.99)
	o.Confirmed, o.PlainSold = len(r.sales["confirm"]), len(r.sales["decrement"])
	o.CheckoutSalesPerSec, o.PlainSalesPerSec = salesRate(r.sales["confirm"], began), salesRate(r.sales["decrement"], began)
	for what, n := range o.Answers {
		switch {
		case strings.HasPrefix(what, "decrement"):
			o.Plain += n
		case what == "hold":
			o.Holds += n
		case strings.HasPrefix(what, "hold"):
			o.HoldsRefused += n
		case what == "confirm late 409 hold_expired":
			o.LateRefused += n
		case what == "abandoned":
			o.Abandoned += n
		}
		if strings.HasPrefix(what, "confirm late") {
			o.LateSent += n
		}
	}
}

// books reads every sku and hold back once every hold expired and its
// units returned (the recovery pass returns them), and judges the run.
func (r *checkoutRun) books(ctx context.Context, skus []string) error {
	api := r.api.At(r.h.replicas[0])
	t := checkoutTally{Initial: r.out.Initial + r.co.Probes, Acked: len(r.acked), FaultFailed: r.out.FaultFailed,
		LateWanted: r.co.Late > 0, LateSent: r.out.LateSent, LateRefused: r.out.LateRefused,
		InTimeWanted: r.co.Abandon+r.co.Late < 1, ExpiryP99: r.out.ExpiryP99, Unprobed: r.out.Probes - r.out.ProbesSold}
	var b books
	var err error
	poll(ctx, returnWait, 250*time.Millisecond, func() bool {
		b, err = booksOf(ctx, api, skus)
		return err != nil || b.held == 0
	})
	if err != nil {
		return err
	}
	t.Left, t.Held, t.Pending = b.left, b.held, b.pending
	ledger := map[string]bool{}
	for _, o := range b.orders {
		ledger[o.ID] = true
		t.LedgerUnits += o.Qty
	}
	for _, id := range r.acked {
		if !ledger[id] {
			t.AckedMissing++
		}
	}
	for _, rec := range r.holds {
		hl, err := api.GetHold(ctx, rec.sku, rec.id)
		if err != nil {
			return fmt.Errorf("read hold %s: %w", rec.id, err)
		}
		if hl.State == "confirmed" {
			t.Confirmed++
			if hl.ConfirmedAt == nil || !hl.ConfirmedAt.Before(hl.ExpiresAt) { // both the store's clock
				t.StampedLate++
			}
		}
		if ledger[rec.id] {
			t.LedgerHolds++
		}
		// The store's word, not the answer's: a late confirm the store
		// took whose answer was lost counts too.
		if rec.readExpired && (rec.sold || hl.State == "confirmed") {
			t.LateSold++
		}
	}
	r.out.Remaining, r.out.LedgerUnits, r.out.HeldLeft = t.Left, t.LedgerUnits, t.Held
	r.out.Checks = t.checks()
	return nil
}

// checkoutTally is what the checks of a checkout run judge.
type checkoutTally struct {
	Initial     int // units over the run's skus
	Acked       int // sales answered 200, one unit each
	LedgerUnits int
	LedgerHolds int // ledger orders whose id is one of the run's holds
	Confirmed   int // holds the store says confirmed
	AckedMissing,
	LateSold, // holds a read found expired that a confirm then sold
	StampedLate int // confirmed holds stamped at or after their expiry
	Left, Held, Pending int // after every hold expired
	FaultFailed         bool
	// Whether the run tested what it claims (see checks).
	LateWanted, InTimeWanted bool
	LateSent, LateRefused    int
	ExpiryP99                float64 // ms, over the probes that sold
	Unprobed                 int     // probes whose unit never sold again
}

// checks are the promises of the checkout scenario.
func (t checkoutTally) checks() []verdict.Check {
	cs := verdict.Of(true,
		verdict.Zero("oversold", max(0, t.Acked-t.Initial, t.LedgerUnits-t.Initial)),
		verdict.Equal("ledger_orders_of_holds", t.LedgerHolds, t.Confirmed),
		verdict.Zero("acked_sales_not_in_ledger", t.AckedMissing),
		verdict.Zero("late_confirms_sold", t.LateSold),
		verdict.Zero("confirms_stamped_after_expiry", t.StampedLate),
		verdict.Equal("available_plus_sold", t.Left+t.LedgerUnits, t.Initial),
		verdict.Zero("held_after_expiry", t.Held),
		verdict.Zero("pending", t.Pending),
		verdict.Check{Name: "faults done", Observed: map[bool]string{true: "not all", false: "all"}[t.FaultFailed], Bound: "all", Pass: !t.FaultFailed})
	// Whether the run tested what the checks above judge: a late confirm
	// refused, a confirm in time sold. Limits, not safety: on a loaded
	// machine, or under a fault, every confirm may arrive after its hold
	// expired, which is no broken promise, only a run that showed less.
	cs = append(cs,
		verdict.Check{Name: "late_confirms_refused", Kind: verdict.Limit, Observed: fmt.Sprintf("%d of %d sent", t.LateRefused, t.LateSent), Bound: "at least one with late buyers",
			Pass: t.LateRefused > 0 || !t.LateWanted},
		verdict.Check{Name: "confirms_sold", Kind: verdict.Limit, Observed: fmt.Sprint(t.Confirmed), Bound: "at least one with buyers who confirm in time",
			Pass: t.Confirmed > 0 || !t.InTimeWanted})
	limit := float64(expiryLimit.Milliseconds())
	seen := report.Ms(t.ExpiryP99)
	if t.Unprobed > 0 {
		seen += fmt.Sprintf(", %d probes never sold", t.Unprobed)
	}
	return append(cs, verdict.Check{Name: "expiry_to_sellable_p99", Kind: verdict.Limit, Observed: seen, Bound: "≤ " + report.Ms(limit), Pass: t.ExpiryP99 <= limit && t.Unprobed == 0})
}

// adhoc strikes a fault asked for with Inject: one of CheckoutFaults as
// the scenario strikes its own, any other with the drill's injector,
// healed a second later.
func (r *checkoutRun) adhoc(ctx context.Context, f string, k int) (string, error) {
	if slices.Contains(CheckoutFaults, f) {
		return r.strike(ctx, f, k)
	}
	d, _ := drill.Lookup(f) // Inject let only a fault with an injector through
	c := drill.Ctx{Env: r.h.env, Probe: r.h.probe, Strategy: r.strategy, Strike: time.Now(), Search: time.Second, TTL: DefaultDrills().FaultTTL}
	ev, err := d.Inject(ctx, &c)
	if ev == nil {
		return "", err
	}
	if err != nil { // struck, then failed: undo what it did
		if ev.Cleanup != nil {
			err = errors.Join(err, ev.Cleanup(context.WithoutCancel(ctx)))
		}
		return ev.Note, err
	}
	if ev.Cleanup != nil {
		_ = drill.Sleep(ctx, time.Second)
		err, ev.Healed = ev.Cleanup(ctx), time.Now()
	}
	r.h.emit(Event{Type: EventFault, Run: r.run, Strategy: r.strategy, Fault: f, Replica: ev.Victim, Shape: ev.Shape, At: ev.At, Until: ev.Healed, Text: ev.Note})
	return ev.Note, err
}

// strike strikes fault f, the k-th of the run, and says what it did.
func (r *checkoutRun) strike(ctx context.Context, f string, k int) (string, error) {
	e := r.h.env
	i := k % e.Len()
	id := e.ID(i)
	ev := Event{Type: EventFault, Run: r.run, Strategy: r.strategy, Fault: f, Replica: id, At: time.Now()}
	defer func() { ev.Until = time.Now(); r.h.emit(ev) }()
	switch f {
	case drill.Crash:
		n := r.waiting(ctx, i)
		if err := e.Kill(i); err != nil {
			return "", err
		}
		_ = drill.Sleep(ctx, checkoutDown)
		ev.Text = fmt.Sprintf("kill -9 replica %s with %d of its buyers between hold and confirm; restarted after %s", id, n, checkoutDown)
		return ev.Text, e.Restart(ctx, i)
	case drill.Pause:
		// Stopped past the TTL; a confirm in flight to it whose hold
		// then reads expired elsewhere must be refused once it resumes.
		n := r.waiting(ctx, i)
		if err := e.Pause(i); err != nil {
			return "", err
		}
		_ = drill.Sleep(context.WithoutCancel(ctx), r.co.HoldTTL+time.Second)
		var inflight map[*holdRec]int
		r.locked(func() { inflight = maps.Clone(r.inflight) })
		stuck, late := 0, 0
		for rec, at := range inflight {
			if at == i {
				stuck++
				if r.readExpired(ctx, rec, (i+1)%e.Len(), 200*time.Millisecond) {
					late++
				}
			}
		}
		ev.Text = fmt.Sprintf("SIGSTOP replica %s, %d of its buyers between hold and confirm, for %s: %d confirms in flight to it, %d of whose holds read expired before SIGCONT", id, n, r.co.HoldTTL+time.Second, stuck, late)
		r.out.PausedLate += late
		return ev.Text, e.Resume(i)
	case drill.StorePartition:
		if err := e.Partition(i, env.LinkMongo); err != nil {
			return "", err
		}
		_ = drill.Sleep(context.WithoutCancel(ctx), checkoutCut)
		ev.Text = fmt.Sprintf("replica %s cut off from MongoDB for %s, then healed", id, checkoutCut)
		return ev.Text, e.Heal(context.WithoutCancel(ctx), i)
	}
	return "", fmt.Errorf("unknown checkout fault %q", f)
}

// waiting waits up to 2s for buyers who hold on replica i to confirm there, and counts them.
func (r *checkoutRun) waiting(ctx context.Context, i int) int {
	n := 0
	poll(ctx, 2*time.Second, 5*time.Millisecond, func() bool {
		r.locked(func() { n = r.thinking[i] })
		return n > 0
	})
	return n
}
