// Package attack sends the harness's load: decrements of a set of skus on a
// set of replicas with Vegeta, one attacker per replica, optionally recorded
// into a history, re-sent with the same Idempotency-Key, and cut short by a
// proxy in front of the first replica. It counts what it sent as it goes
// and reads what a decrement answer says (Interpret); judging the answers
// is the caller's job.
package attack

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/stocklock/stocklock/loadtest/history"
	"github.com/stocklock/stocklock/loadtest/verdict"
	"github.com/stocklock/stocklock/pkg/stockclient"
)

// Options describe one attack.
type Options struct {
	Name     string   // the attack's name in Vegeta's results
	Targets  []string // replica base URLs, one attacker each
	SKUs     []string
	Writers  []string // the strategies requests name, in turn
	Qty      int
	Rate     int           // requests per second over all targets; 0: unpaced
	Requests int           // over all targets; 0: bounded by Duration only
	Duration time.Duration // 0: bounded by Requests only
	Timeout  time.Duration // per request, retries included
	Workers  int           // initial, over all targets
	// MaxWorkers caps the requests in flight, over all targets.
	MaxWorkers int
	Skew       float64 // 0: uniform over SKUs; > 1: Zipf exponent
	// Keys, if not empty, gives every request an Idempotency-Key of its
	// own, <Keys>-r<target>-<n>.
	Keys string
	// Retries re-sends a request whose outcome is unknown, with the same
	// key, each attempt bounded by AttemptTimeout; CutRate is then the
	// share of the first target's answers a proxy cuts.
	Retries        int
	AttemptTimeout time.Duration
	CutRate        float64
	// Recorder, if not nil, records every attempt into a history.
	Recorder *history.Recorder
}

// Attack is an attack under way.
type Attack struct {
	// Results carries every answer; it is closed when every attacker
	// has finished. The caller must drain it, and then Close the attack.
	Results <-chan *vegeta.Result
	Sent    atomic.Int64 // requests sent so far
	Started time.Time
	proxy   *cutProxy
	closers []func()
}

// Close releases the attack's connections and its proxy.
func (a *Attack) Close() {
	for _, c := range a.closers {
		c()
	}
}

// Cuts is how many answers the proxy cut (0 without retries).
func (a *Attack) Cuts() int {
	if a.proxy == nil {
		return 0
	}
	return int(a.proxy.Cuts())
}

// Start starts one attacker per target, each with an equal share of the
// rate, the request count and the workers, as if every replica had clients
// of its own. With one attacker alternating between them, a frozen replica
// would soon hold every worker (its requests hang) and starve the live
// ones: the client's head-of-line blocking, not the service's, would be
// measured. Ending ctx stops every attacker and abandons the requests in
// flight.
func Start(ctx context.Context, o Options) (*Attack, error) {
	if len(o.Targets) == 0 || len(o.SKUs) == 0 || len(o.Writers) == 0 {
		return nil, errors.New("attack: no targets, skus or writers")
	}
	targets, proxy, err := frontTargets(o)
	if err != nil {
		return nil, err
	}
	results := make(chan *vegeta.Result)
	a := &Attack{Results: results, proxy: proxy}
	if proxy != nil {
		a.closers = append(a.closers, func() { _ = proxy.Close() })
	}
	picker := newSKUPicker(len(o.SKUs), o.Skew, time.Now().UnixNano())
	n := len(targets)
	var attacking sync.WaitGroup
	for i, base := range targets {
		atk, tr := newAttacker(ctx, o, n, base)
		stop := context.AfterFunc(ctx, func() { atk.Stop() })
		a.closers = append(a.closers, tr.CloseIdleConnections, func() { stop() })
		keys := ""
		if o.Keys != "" {
			keys = fmt.Sprintf("%s-r%d", o.Keys, i)
		}
		targeter := decrementTargeter(base, o.SKUs, picker, o.Qty, o.Writers, keys)
		counted := func(tg *vegeta.Target) error {
			a.Sent.Add(1)
			return targeter(tg)
		}
		rate := Share(o.Rate, n, i)
		if o.Rate > 0 {
			rate = max(rate, 1) // 0 would mean unpaced
		}
		count := Share(o.Requests, n, i)
		if o.Requests > 0 && count == 0 {
			continue // fewer requests than targets: none for this one (0 would mean unbounded)
		}
		attacking.Go(func() {
			for r := range atk.Attack(counted, pacer(rate, count), o.Duration, o.Name) {
				results <- r
			}
		})
	}
	a.Started = time.Now()
	go func() {
		attacking.Wait()
		close(results)
	}()
	return a, nil
}

// frontTargets are the base URLs the attackers send to: with retries on,
// the first goes through a proxy that cuts a share of the answers.
func frontTargets(o Options) ([]string, *cutProxy, error) {
	targets := append([]string(nil), o.Targets...)
	if o.Retries == 0 {
		return targets, nil, nil
	}
	u, err := url.Parse(targets[0])
	if err != nil {
		return nil, nil, fmt.Errorf("replica URL %q: %w", targets[0], err)
	}
	if u.Scheme != "http" {
		return nil, nil, fmt.Errorf("retries: the cutting proxy forwards plain TCP, but %s is %s", targets[0], u.Scheme)
	}
	p, err := startCutProxy(u.Host, o.CutRate)
	if err != nil {
		return nil, nil, fmt.Errorf("start the cutting proxy: %w", err)
	}
	targets[0] = "http://" + p.Addr()
	return targets, p, nil
}

// ctxTransport ties every attack request to the attack's context, so that
// ending it also abandons the requests in flight instead of waiting for
// their timeout.
type ctxTransport struct {
	ctx  context.Context
	base http.RoundTripper
}

func (t ctxTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.base.RoundTrip(req.WithContext(t.ctx))
}

// newAttacker returns a fresh Attacker (an Attacker is single-use) for one
// of n targets, with its share of the workers, its own connection pool and,
// with a recorder, a transport that records the attack on target, retrying
// as configured.
func newAttacker(ctx context.Context, o Options, n int, target string) (*vegeta.Attacker, *http.Transport) {
	maxWorkers := max(1, o.MaxWorkers/n)
	tr := &http.Transport{
		Proxy:               nil, // the replicas are talked to directly
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: maxWorkers,
		IdleConnTimeout:     30 * time.Second,
	}
	var rt http.RoundTripper = tr
	if o.Recorder != nil {
		t := &recordingTransport{base: tr, rec: o.Recorder, target: target}
		if o.Retries > 0 {
			t.retries, t.attempt = o.Retries, o.AttemptTimeout
		}
		rt = t
	}
	client := &http.Client{
		Timeout:   o.Timeout,
		Transport: ctxTransport{ctx: ctx, base: rt},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	return vegeta.NewAttacker(
		vegeta.Client(client),
		vegeta.Workers(uint64(max(1, o.Workers/n))),
		vegeta.MaxWorkers(uint64(maxWorkers)),
		vegeta.MaxBody(64<<10),
	), tr
}

// Share is part i of total split over n: the parts differ by at most one
// and add up to total.
func Share(total, n, i int) int {
	s := total / n
	if i < total%n {
		s++
	}
	return s
}

type response struct {
	OrderID   string `json:"order_id"`
	SKU       string `json:"sku"`
	Qty       int    `json:"qty"`
	Remaining *int   `json:"remaining"`
	Replica   string `json:"replica"`
	Fence     int64  `json:"fence"`
	Error     string `json:"error"`
}

// Interpret classifies one answer and, for a sale, returns its order; for
// anything else, a short note ("503 fenced", a transport error).
func Interpret(r *vegeta.Result, qty int) (verdict.Class, verdict.Order, string) {
	var body response
	if r.Code != 0 && len(r.Body) > 0 {
		_ = json.Unmarshal(r.Body, &body)
	}
	cls := verdict.Classify(int(r.Code), body.Error)
	if cls != verdict.Sold {
		note := r.Error
		if r.Code != 0 {
			text := string(r.Body)
			if len(text) > 120 {
				text = text[:120] + "…"
			}
			note = fmt.Sprintf("%d %s", r.Code, cmp.Or(body.Error, strings.TrimSpace(text)))
		}
		return cls, verdict.Order{}, note
	}
	o := verdict.Order{ID: body.OrderID, SKU: cmp.Or(body.SKU, stockclient.SKUOfURL(r.URL)), Qty: cmp.Or(body.Qty, qty),
		Replica: body.Replica, Fence: body.Fence}
	return cls, o, ""
}

// Refused reports whether a transport error is a refused connection: the
// request never reached a replica, so it cannot have sold anything.
func Refused(msg string) bool { return strings.Contains(strings.ToLower(msg), "connection refused") }

// TransportKind shortens a transport error to its kind, so that tables
// group them.
func TransportKind(msg string) string {
	m := strings.ToLower(msg)
	switch {
	case Refused(msg):
		return "no answer: connection refused"
	case strings.Contains(m, "reset"), strings.Contains(m, "eof"), strings.Contains(m, "broken pipe"):
		return "no answer: connection reset"
	case strings.Contains(m, "timeout"), strings.Contains(m, "deadline"):
		return "no answer: timeout"
	default:
		return "no answer: other"
	}
}

// skuPicker chooses the sku of each request: always sku 0 for one hot sku,
// uniformly for skew 0, or Zipf-distributed (sku 0 the hottest).
type skuPicker struct {
	mu   sync.Mutex
	n    int
	rng  *rand.Rand
	zipf *rand.Zipf
}

func newSKUPicker(n int, skew float64, seed int64) *skuPicker {
	p := &skuPicker{n: n, rng: rand.New(rand.NewSource(seed))}
	if n > 1 && skew > 1 {
		p.zipf = rand.NewZipf(p.rng, skew, 1, uint64(n-1))
	}
	return p
}

func (p *skuPicker) pick() int {
	if p.n <= 1 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.zipf != nil {
		return int(p.zipf.Uint64())
	}
	return p.rng.Intn(p.n)
}

// decrementTargeter returns a Vegeta Targeter, safe for concurrent use by
// the attack's workers, whose requests go to the replica at base and
// alternate across the strategies (one, or every one of a mixed run), each
// decrementing one sku. With keys != "", every request carries an
// Idempotency-Key of its own, keys-<n>.
func decrementTargeter(base string, skus []string, picker *skuPicker, qty int, strategies []string, keys string) vegeta.Targeter {
	bodies := make([][]byte, len(strategies))
	for i, s := range strategies {
		bodies[i], _ = json.Marshal(map[string]any{"qty": qty, "strategy": s})
	}
	hdr := http.Header{"Content-Type": []string{"application/json"}}
	urls := make([]string, len(skus))
	for i, s := range skus {
		urls[i] = base + "/v1/items/" + url.PathEscape(s) + "/decrement"
	}
	var next atomic.Uint64
	return func(t *vegeta.Target) error {
		if t == nil {
			return vegeta.ErrNilTarget
		}
		i := next.Add(1) - 1
		t.Method = http.MethodPost
		t.URL = urls[picker.pick()]
		t.Body = bodies[i%uint64(len(bodies))]
		t.Header = hdr
		if keys != "" {
			t.Header = hdr.Clone()
			t.Header.Set("Idempotency-Key", fmt.Sprintf("%s-%d", keys, i))
		}
		return nil
	}
}

// countedPacer wraps a Pacer and stops the attack after n hits (n > 0).
type countedPacer struct {
	vegeta.Pacer
	n uint64
}

func (p countedPacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if p.n > 0 && hits >= p.n {
		return 0, true
	}
	return p.Pacer.Pace(elapsed, hits)
}

// pacer builds the attack's pacer: a constant rate, or with rate 0 no
// pacing at all (each worker sends its next request when the last one is
// answered), stopped after requests hits when requests > 0.
func pacer(rate, requests int) vegeta.Pacer {
	return countedPacer{Pacer: vegeta.ConstantPacer{Freq: rate, Per: time.Second}, n: uint64(requests)}
}
