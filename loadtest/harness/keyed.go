package harness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/stocklock/stocklock/loadtest/drill"
	"github.com/stocklock/stocklock/loadtest/env"
	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/loadtest/verdict"
	"github.com/stocklock/stocklock/pkg/stockclient"
)

// The keyed drill's shape. Purchases start evenly over keyedWindow; the
// first replica is killed -9 keyedKill into it and restarted keyedDown
// later; the second replica is frozen keyedFreezeAt into it, when the
// purchases the kill caught have settled, for its heartbeat timeout and
// two seconds more (so also past the lock TTL).
const (
	keyedWindow   = 20 * time.Second
	keyedKill     = 3 * time.Second
	keyedDown     = time.Second
	keyedFreezeAt = 10 * time.Second
	keyedFreeze   = env.HeartbeatTimeout + 2*time.Second
	keyedAttempt  = 3 * time.Second  // one attempt's own timeout
	keyedGiveUp   = 90 * time.Second // a purchase stops trying after this
)

// Keyed is the keyed drill, Repeat times: every safe strategy sells
// Purchases purchases on a sku of its own, each with an Idempotency-Key of
// its own, retried with that key on the other replica after every answer
// that is not a sale or sold_out (a timeout, a cut connection, a 5xx, 409
// idempotency_in_progress), while the first replica is killed -9 and the
// second frozen. It checks that every purchase sold exactly once (units
// taken = purchases sold = ledger orders, no key with two orders) and
// measures how long each took to settle.
type Keyed struct {
	Repeat    int
	Purchases int // per strategy
	Drills
}

// DefaultKeyed is the keyed drill with the command line's defaults.
func DefaultKeyed() *Keyed { return &Keyed{Repeat: 1, Purchases: 40, Drills: DefaultDrills()} }

func (s Keyed) Check(c Config, bad Problem) {
	between(bad, "Repeat", s.Repeat, 1, 100)
	s.check(c, bad)
	between(bad, "Purchases", s.Purchases, 1, 10_000)
	if len(c.Replicas) > 0 || c.LocalReplicas != 2 {
		bad("the keyed drill needs the two replicas the harness starts: drop Replicas and LocalReplicas")
	}
}

func (s Keyed) Run(ctx context.Context, h *Harness, rep *report.Report) error {
	rep.Settings.Repeat = s.Repeat
	rep.Sections = append(rep.Sections, report.KeyedSection)
	rep.Settings.FaultTTL, rep.Settings.WriteStall = s.FaultTTL.String(), s.WriteStall.String()
	if h.env == nil || h.env.Len() < 2 {
		return errors.New("the keyed drill needs two replicas the harness starts (--local-replicas 2)")
	}
	strategies := safeOf(h.cfg.Strategies)
	if len(strategies) == 0 {
		return errors.New("the keyed drill: no safe strategy among --strategies")
	}
	if err := h.warmup(ctx); err != nil {
		return err
	}
	for r := 1; r <= s.Repeat; r++ {
		h.logf("[%d/%d] keyed drill: %d purchases each of %s, kill -9 of replica %s, then a %s freeze of replica %s",
			r, s.Repeat, s.Purchases, strings.Join(strategies, ", "), h.env.ID(0), keyedFreeze, h.env.ID(1))
		run, err := h.keyedOnce(ctx, r, strategies, s.Purchases)
		if err != nil {
			return err
		}
		verdictText := map[bool]string{true: "every purchase sold exactly once",
			false: fmt.Sprintf("FAILED: %v", verdict.Failures(run.Checks))}[run.OK()]
		h.logf("  → sold %d of %d, units taken %d, ledger %d, keys sold twice %d; longest settle %.2fs (p99 %.2fs), %.2fs after the kill, %.2fs after the freeze; %s",
			run.Sold, run.Purchases, run.UnitsTaken, run.LedgerOrders, run.KeysTwice, run.SettleMax, run.SettleP99, run.AfterKillMax, run.AfterFreezeMax, verdictText)
		rep.Keyed = append(rep.Keyed, run)
	}
	return nil
}

// purchase is one keyed purchase of the drill, first the replica of its
// first attempt, and what became of it.
type purchase struct {
	sku, strategy, key string
	first              int

	sold     bool
	attempts int
	answers  map[string]int
	// sent and soldAt are when its first attempt went out and when its
	// sale came back; unanswered that its first attempt got no answer.
	sent, soldAt time.Time
	unanswered   bool
}

// faultTimes are when the drill killed the first replica and froze the
// second (zero if it did not), what failed if something did, and notes
// of what was done.
type faultTimes struct {
	kill, freeze time.Time
	failed       string
	notes        []string
}

func (h *Harness) keyedOnce(ctx context.Context, rep int, strategies []string, per int) (report.KeyedRun, error) {
	run := report.KeyedRun{Repeat: rep, Strategies: strategies, Answers: map[string]int{}}
	bases := h.env.Bases()
	stock := per + per/2 // room to show a double sale as units taken
	var skus []string
	for _, st := range strategies {
		sku := fmt.Sprintf("%s-keyed%d-%s", h.prefix, rep, st)
		if _, err := h.api.At(bases[0]).PutItem(ctx, sku, int64(stock)); err != nil {
			return run, fmt.Errorf("keyed drill: set the stock of %s: %w", sku, err)
		}
		skus = append(skus, sku)
	}
	var ps []purchase
	for i := range per {
		for j, st := range strategies {
			ps = append(ps, purchase{sku: skus[j], strategy: st, key: fmt.Sprintf("%s-k%d-%d-%s", h.prefix, rep, i, st), first: (i + j) % 2})
		}
	}
	run.Purchases = len(ps)

	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	client := stockclient.New("", stockclient.WithHTTPClient(&http.Client{Transport: tr, Timeout: keyedAttempt}))
	began := time.Now()
	faults := make(chan faultTimes, 1)
	go func() { faults <- h.keyedFaults(ctx, began) }()

	var wg sync.WaitGroup
	paced(ctx, &wg, began, keyedWindow, len(ps), func(i int) { buy(ctx, client, bases, &ps[i]) })
	wg.Wait()
	ft := <-faults
	run.Faults = ft.notes
	if err := ctx.Err(); err != nil {
		return run, context.Cause(ctx)
	}

	var settles []float64
	for _, r := range ps {
		// Caught by a fault: the first attempt went to the victim before
		// the fault and got no answer. How long after the fault it sold
		// is how long the fault kept it from settling.
		caught := func(victim int, at time.Time) float64 {
			if !r.sold || !r.unanswered || at.IsZero() || r.first != victim || !r.sent.Before(at) {
				return 0
			}
			return r.soldAt.Sub(at).Seconds()
		}
		run.AfterKillMax = max(run.AfterKillMax, caught(0, ft.kill))
		run.AfterFreezeMax = max(run.AfterFreezeMax, caught(1, ft.freeze))
		run.Attempts += r.attempts
		for k, n := range r.answers {
			run.Answers[k] += n
		}
		if r.sold {
			run.Sold++
			settles = append(settles, r.soldAt.Sub(r.sent).Seconds())
		} else {
			run.Unfinished++
		}
	}
	sort.Float64s(settles)
	run.SettleP50, run.SettleP99, run.SettleMax = quantile(settles, 0.5), quantile(settles, 0.99), quantile(settles, 1)

	if _, err := h.waitDrained(ctx, bases[0], skus); err != nil {
		return run, err
	}
	b, err := booksOf(ctx, h.api.At(bases[0]), skus)
	if err != nil {
		return run, fmt.Errorf("keyed drill: %w", err)
	}
	_, run.KeysTwice = verdict.DoubleSold(b.orders) // each key is of one sku
	run.UnitsTaken, run.Pending, run.LedgerOrders = len(skus)*stock-b.left, b.pending, len(b.orders)
	run.Checks = verdict.Of(true, verdict.Zero("unfinished", run.Unfinished), verdict.Equal("units_taken", run.UnitsTaken, run.Sold),
		verdict.Equal("ledger_orders", run.LedgerOrders, run.UnitsTaken), verdict.Zero("keys_sold_twice", run.KeysTwice),
		verdict.Zero("pending", run.Pending), verdict.Check{Name: "faults done", Observed: cmp.Or(ft.failed, "all"), Bound: "all", Pass: ft.failed == ""})
	return run, nil
}

// keyedFaults strikes the drill's kill and freeze (see keyedKill) and
// returns what it did, with times from began.
func (h *Harness) keyedFaults(ctx context.Context, began time.Time) (ft faultTimes) {
	// did notes what was done, or what failed (which marks the run): false stops the drill.
	did := func(err error, done, failed string) bool {
		if err != nil {
			done = fmt.Sprintf("%s failed: %v", failed, err)
		}
		ft.notes = append(ft.notes, fmt.Sprintf("%5.1fs %s", time.Since(began).Seconds(), done))
		h.logf("  %s", ft.notes[len(ft.notes)-1])
		if err != nil {
			ft.failed = ft.notes[len(ft.notes)-1]
		}
		return err == nil
	}
	if drill.Sleep(ctx, time.Until(began.Add(keyedKill))) != nil {
		return
	}
	a, b := h.env.ID(0), h.env.ID(1)
	how := h.waitHolding(ctx, 0)
	if ctx.Err() != nil {
		return
	}
	ft.kill = time.Now()
	if !did(h.env.Kill(0), fmt.Sprintf("kill -9 replica %s (%s)", a, how), "kill -9 of replica "+a) || drill.Sleep(ctx, keyedDown) != nil {
		return
	}
	if !did(h.env.Restart(ctx, 0), "replica "+a+" restarted and ready", "restart of replica "+a) ||
		drill.Sleep(ctx, time.Until(began.Add(keyedFreezeAt))) != nil {
		return
	}
	how = h.waitHolding(ctx, 1)
	if ctx.Err() != nil {
		return
	}
	ft.freeze = time.Now()
	if !did(h.env.Pause(1), fmt.Sprintf("SIGSTOP replica %s (%s)", b, how), "SIGSTOP of replica "+b) {
		return
	}
	// Whatever happens, the replica must not stay stopped.
	_ = drill.Sleep(context.WithoutCancel(ctx), keyedFreeze)
	did(h.env.Resume(1), fmt.Sprintf("SIGCONT replica %s, after %s", b, keyedFreeze), "SIGCONT of replica "+b)
	return
}

// waitHolding polls replica i's /healthz for up to two seconds until it holds a lock, and so
// has a keyed request in flight between its reservation and its stock write, for the fault
// to strand. It says what it saw.
func (h *Harness) waitHolding(ctx context.Context, i int) string {
	n := 0
	if poll(ctx, 2*time.Second, 5*time.Millisecond, func() bool {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		body, err := h.probe.At(h.env.Bases()[i]).Health(cctx)
		cancel()
		n = 0
		for _, c := range body.LocksHeld {
			n += c
		}
		return err == nil && n > 0
	}) {
		return fmt.Sprintf("holding %d locks", n)
	}
	return "no lock held within 2s"
}

// buy sends one purchase until it sells, sells out or keyedGiveUp passes,
// switching replicas after every answer that is not final.
func buy(ctx context.Context, client *stockclient.Client, bases []string, r *purchase) {
	r.answers, r.sent = map[string]int{}, time.Now()
	inTurn(ctx, len(bases), r.first, 100*time.Millisecond, keyedGiveUp, func(i int) bool {
		_, err := client.At(bases[i]).Decrement(ctx, r.sku, 1, r.strategy, stockclient.IdempotencyKey(r.key))
		answer := answerOf(err)
		if r.attempts++; r.attempts == 1 {
			r.unanswered = answer == noAnswer
		}
		if err == nil {
			r.sold, r.soldAt = true, time.Now()
			return true
		}
		r.answers[answer]++
		return answer == "409 sold_out"
	})
}

// books are the stock left, units held and orders pending over some skus, and their ledgers' orders.
type books struct {
	left, held, pending int
	orders              []verdict.Order
}

func booksOf(ctx context.Context, api *stockclient.Client, skus []string) (b books, err error) {
	for _, sku := range skus {
		it, err := api.GetItem(ctx, sku)
		if err != nil {
			return b, fmt.Errorf("read %s: %w", sku, err)
		}
		orders, err := ledgerOrders(ctx, api, sku, time.Time{})
		if err != nil {
			return b, fmt.Errorf("read the ledger of %s: %w", sku, err)
		}
		b.left, b.held, b.pending, b.orders = b.left+int(it.Stock), b.held+int(it.Held), b.pending+len(it.Pending), append(b.orders, orders...)
	}
	return b, nil
}

// paced starts run(i) in wg for each i below n, evenly over d from began, until ctx ends.
func paced(ctx context.Context, wg *sync.WaitGroup, began time.Time, d time.Duration, n int, run func(i int)) {
	for i := range n {
		if drill.Sleep(ctx, time.Until(began.Add(d*time.Duration(i)/time.Duration(n)))) != nil {
			return
		}
		wg.Go(func() { run(i) })
	}
}

// inTurn calls try with the replicas' indexes in turn, from first, until
// it says the answer is final, giveUp passes or ctx ends, pausing between
// tries from pause, doubling, up to a second.
func inTurn(ctx context.Context, n, first int, pause, giveUp time.Duration, try func(i int) (final bool)) {
	for i, start := first, time.Now(); !try(i) && time.Since(start) <= giveUp && drill.Sleep(ctx, pause) == nil; i = (i + 1) % n {
		pause = min(2*pause, time.Second)
	}
}

const noAnswer = "no answer"

// answerOf words an answer for the tallies: "" for a success, noAnswer,
// or its status and code ("409 sold_out").
func answerOf(err error) string {
	var e *stockclient.Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &e):
		return fmt.Sprintf("%d %s", e.Status, e.Code)
	}
	return noAnswer
}

// quantile returns the q quantile of sorted values (nearest rank), 0 for none.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
