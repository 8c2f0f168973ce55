// Package stockclient is a Go client of the stock service's HTTP API
// (docs/api.md; the OpenAPI document is services/stock/server/openapi.json,
// which every replica serves at GET /openapi.json).
//
// A Client talks to one replica; At gives a client of another replica that
// shares its connections and options. Errors of the service are *Error,
// with errors.Is support for each code (ErrSoldOut, ErrLockUnavailable...).
// A decrement takes an Idempotency-Key and a PUT an If-Match as call
// options; a restock always carries a key. WithRetry makes the client
// retry what Retryable says is safe, as docs/api.md's retry tables say,
// honouring Retry-After.
package stockclient

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stocklock/stocklock/pkg/stockapi"
)

// Client calls one replica of the stock service. It is safe for concurrent
// use.
type Client struct {
	base   string
	hc     *http.Client
	token  string
	retry  *Retry
	budget *retryBudget // shared with the clients At makes
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sends the requests with hc instead of a client of the
// package's own.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithTimeout bounds each attempt of a request to d; an attempt that runs
// out is retried as a lost answer (see Retryable), within the call's
// context.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) {
		hc := *c.hc
		hc.Timeout = d
		c.hc = &hc
	}
}

// WithAdminToken sends token as the bearer token of stock changes (PUT and
// restock).
func WithAdminToken(token string) Option { return func(c *Client) { c.token = token } }

// Retry is how a client retries. A request is sent again only when
// Retryable says it is safe, and the client's retry budget has a retry
// left, after a jittered exponential backoff or the answer's Retry-After
// plus up to half of it again at random, whichever is longer, and never
// past its context. The jitter keeps a herd of clients shed together
// (503 overloaded, Retry-After: 1) from coming back together.
type Retry struct {
	Attempts int           // attempts in all, the first included; at least 1 (default 4)
	Base     time.Duration // first backoff (default 100ms), doubled each attempt
	Max      time.Duration // largest backoff (default 2s); Retry-After may exceed it
	// Ratio and Burst are the retry budget, a token bucket shared by the
	// client and every client At makes from it: each request adds Ratio
	// of a retry, each retry takes one, and the bucket holds at most
	// Burst (it starts full). So retries stay within Ratio of the
	// requests, plus Burst: an overloaded service gets a tenth more
	// requests from its clients' retries, not Attempts times as many.
	// A request that finds no retry left gets its last answer.
	// Defaults 0.1 and 10.
	Ratio float64
	Burst float64
}

// retryBudget is the token bucket of Retry.Ratio and Retry.Burst.
type retryBudget struct {
	mu           sync.Mutex
	tokens       float64
	ratio, burst float64
}

// request earns a request's share of a retry.
func (b *retryBudget) request() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens = min(b.tokens+b.ratio, b.burst)
}

// retry takes a retry, if one is left.
func (b *retryBudget) retry() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// WithRetry makes the client retry what is safe to retry (see Retryable).
func WithRetry(r Retry) Option {
	if r.Attempts < 1 {
		r.Attempts = 4
	}
	if r.Base <= 0 {
		r.Base = 100 * time.Millisecond
	}
	if r.Max <= 0 {
		r.Max = 2 * time.Second
	}
	if r.Ratio <= 0 {
		r.Ratio = 0.1
	}
	if r.Burst <= 0 {
		r.Burst = 10
	}
	return func(c *Client) {
		c.retry = &r
		c.budget = &retryBudget{tokens: r.Burst, ratio: r.Ratio, burst: r.Burst}
	}
}

// New returns a client of the replica at baseURL (such as
// "http://localhost:8081"). Without WithHTTPClient it talks to the replica
// directly, never through a proxy from the environment.
func New(baseURL string, opts ...Option) *Client {
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 8, IdleConnTimeout: 30 * time.Second}
	c := &Client{base: strings.TrimSuffix(baseURL, "/"), hc: &http.Client{Transport: tr}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// At returns a client of the replica at baseURL with c's connections and
// options.
func (c *Client) At(baseURL string) *Client {
	d := *c
	d.base = strings.TrimSuffix(baseURL, "/")
	return &d
}

// BaseURL is the URL of the client's replica.
func (c *Client) BaseURL() string { return c.base }

// CallOption sets a header of one call.
type CallOption func(*callOpts)

type callOpts struct {
	key     string // Idempotency-Key
	ifMatch string // If-Match
	split   bool   // a PUT's "split"
	prefer  string // Prefer
	status  *int   // set to the answer's status
}

func applyOpts(opts []CallOption) callOpts {
	var o callOpts
	for _, f := range opts {
		f(&o)
	}
	return o
}

// IdempotencyKey sends key as the Idempotency-Key of a decrement: a retry
// with the same key, on any replica, answers with the first request's sale
// instead of selling again. Use one key per intended purchase, made before
// the first attempt (NewIdempotencyKey).
func IdempotencyKey(key string) CallOption {
	return func(o *callOpts) { o.key = key }
}

// IfMatch makes a PUT set the stock only if the item is still at version
// (Item.Version of a read); otherwise it fails with ErrVersionMismatch.
func IfMatch(version int64) CallOption {
	return func(o *callOpts) { o.ifMatch = `"` + strconv.FormatInt(version, 10) + `"` }
}

// SplitStock makes a PUT set the stock split across the replica's
// buckets, as the buckets strategy sells it, so that no sale pays the
// split (docs/buckets.md).
func SplitStock() CallOption {
	return func(o *callOpts) { o.split = true }
}

// NewIdempotencyKey returns a new random key (32 hex digits).
func NewIdempotencyKey() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// The bodies of the API are pkg/stockapi's, which the service's replica
// writes and reads too; these aliases keep them where the client's users
// find them.
type (
	// Item is an item as the service shows it.
	Item = stockapi.Item
	// ItemHold is a hold as its item shows it (Item.Holds).
	ItemHold = stockapi.ItemHold
	// Sale is a successful decrement, or a hold's confirm; see
	// stockapi.Sale for when Remaining is nil.
	Sale = stockapi.Sale
	// Order is one order of the ledger.
	Order = stockapi.Order
	// OrdersPage is one page of the ledger.
	OrdersPage = stockapi.OrdersPage
	// Health is the answer of /healthz and /readyz.
	Health = stockapi.Health
	// Hold is a hold as the service shows it (docs/holds.md).
	Hold = stockapi.Hold
)

// OrdersQuery selects a page of the ledger. Zero values are left out.
type OrdersQuery struct {
	Since time.Time // orders at or after
	Limit int       // 1 to 1000 (the service's default is 100)
	After string    // the Next of the previous page
}

// ItemURL is the URL of sku's item on the replica at base.
func ItemURL(base, sku string) string { return base + "/v1/items/" + url.PathEscape(sku) }

// SKUOfURL returns the sku of a URL (or path) of an item,
// .../v1/items/<sku>[/...], and "" for any other URL.
func SKUOfURL(u string) string {
	const marker = "/v1/items/"
	i := strings.Index(u, marker)
	if i < 0 {
		return ""
	}
	rest := u[i+len(marker):]
	if j := strings.IndexAny(rest, "/?"); j >= 0 {
		rest = rest[:j]
	}
	if s, err := url.PathUnescape(rest); err == nil {
		return s
	}
	return rest
}

// PutItem sets (or resets) sku's stock, creating the item if needed. It
// needs WithAdminToken. With IfMatch it sets it only at that version;
// with SplitStock it sets it split across the replica's buckets.
//
// A set is not idempotent under concurrent sales: sent twice with a sale
// in between, the second erases the sale. So even WithRetry sends it again
// only after an answer of the service that says nothing changed; after no
// answer, or ErrOutcomeUnknown, the stock may or may not have been set:
// read the item before deciding again. Restock is the change that is safe
// to retry.
func (c *Client) PutItem(ctx context.Context, sku string, stock int64, opts ...CallOption) (Item, error) {
	var it Item
	o := applyOpts(opts)
	body := stockapi.StockChange{Stock: stock, Split: o.split}
	_, err := c.do(ctx, Call{http.MethodPut, RouteItem, false}, ItemURL(c.base, sku), body, &it, o)
	return it, err
}

// Restock adds qty units to sku's stock (removes -qty when qty is
// negative), once: it carries an Idempotency-Key (IdempotencyKey's, or a
// new one made before the first attempt), so that sending it again after
// a lost answer, WithRetry's retries included, cannot apply it twice. A
// retry whose first attempt landed answers the item as it is now. To send
// it again yourself (later, or to another replica), pass the key with
// IdempotencyKey: a new key is a new restock. It needs WithAdminToken. ErrInsufficientStock: the stock would go below
// zero, and nothing changed.
func (c *Client) Restock(ctx context.Context, sku string, qty int64, opts ...CallOption) (Item, error) {
	o := applyOpts(opts)
	if o.key == "" {
		o.key = NewIdempotencyKey()
	}
	var it Item
	body := stockapi.Restock{Qty: qty}
	_, err := c.do(ctx, Call{http.MethodPost, RouteRestock, true}, ItemURL(c.base, sku)+"/restock", body, &it, o)
	return it, err
}

// GetItem reads sku's item.
func (c *Client) GetItem(ctx context.Context, sku string) (Item, error) {
	var it Item
	_, err := c.do(ctx, Call{http.MethodGet, RouteItem, false}, ItemURL(c.base, sku), nil, &it)
	return it, err
}

// Decrement sells qty units of sku with strategy ("" for the replica's
// default). With IdempotencyKey, retries (WithRetry's too) sell at most
// once.
func (c *Client) Decrement(ctx context.Context, sku string, qty int64, strategy string, opts ...CallOption) (Sale, error) {
	body := stockapi.DecrementRequest{Qty: qty, Strategy: strategy}
	// Keyed, a decrement may be sent twice: the key sells it once.
	o := applyOpts(opts)
	var s Sale
	h, err := c.do(ctx, Call{http.MethodPost, RouteDecrement, o.key != ""}, ItemURL(c.base, sku)+"/decrement", body, &s, o)
	if err == nil {
		s.Replayed = h.Get("Idempotent-Replayed") == "true"
	}
	return s, err
}

// Orders reads one page of sku's ledger.
func (c *Client) Orders(ctx context.Context, sku string, q OrdersQuery) (OrdersPage, error) {
	v := url.Values{}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.After != "" {
		v.Set("after", q.After)
	}
	u := ItemURL(c.base, sku) + "/orders"
	if len(v) > 0 {
		u += "?" + v.Encode()
	}
	var p OrdersPage
	_, err := c.do(ctx, Call{http.MethodGet, RouteOrders, false}, u, nil, &p)
	return p, err
}

// AllOrders reads sku's whole ledger since a time (the zero time for all),
// following its pages.
func (c *Client) AllOrders(ctx context.Context, sku string, since time.Time) ([]Order, error) {
	q := OrdersQuery{Since: since, Limit: 1000}
	var all []Order
	for {
		p, err := c.Orders(ctx, sku, q)
		if err != nil {
			return nil, err
		}
		all = append(all, p.Orders...)
		if p.Next == "" {
			return all, nil
		}
		q.After = p.Next
	}
}

// Health asks /healthz: the replica's name and the leases it holds.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	_, err := c.do(ctx, Call{http.MethodGet, RouteHealthz, false}, c.base+RouteHealthz, nil, &h)
	return h, err
}

// Ready asks /readyz once; a replica that is not ready answers
// ErrNotReady, whose Checks say which dependency fails.
func (c *Client) Ready(ctx context.Context) (Health, error) {
	var h Health
	_, err := c.do(ctx, Call{http.MethodGet, RouteReadyz, false}, c.base+RouteReadyz, nil, &h)
	return h, err
}

// Metrics fetches the Prometheus text exposition.
func (c *Client) Metrics(ctx context.Context) ([]byte, error) {
	var b []byte
	_, err := c.do(ctx, Call{http.MethodGet, RouteMetrics, false}, c.base+RouteMetrics, nil, &b)
	return b, err
}

// OpenAPI fetches the replica's OpenAPI document.
func (c *Client) OpenAPI(ctx context.Context) ([]byte, error) {
	var b []byte
	_, err := c.do(ctx, Call{http.MethodGet, RouteOpenAPI, false}, c.base+RouteOpenAPI, nil, &b)
	return b, err
}

// WaitReady polls /readyz of the replicas at bases (with c's options)
// until all answer 200, ctx ends or timeout passes. progress, if not nil,
// is told about once a second which replicas it still waits for.
func (c *Client) WaitReady(ctx context.Context, bases []string, timeout time.Duration, progress func(string)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pending := append([]string(nil), bases...)
	lastErr := map[string]error{}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastNote := time.Now()
	for {
		var still []string
		for _, b := range pending {
			cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := c.At(b).Ready(cctx)
			ccancel()
			if err != nil {
				lastErr[b] = err
				still = append(still, b)
			}
		}
		pending = still
		if len(pending) == 0 {
			return nil
		}
		if progress != nil && time.Since(lastNote) >= time.Second {
			lastNote = time.Now()
			progress(fmt.Sprintf("waiting for %s: %v", strings.Join(pending, ", "), lastErr[pending[0]]))
		}
		select {
		case <-ctx.Done():
			var errs []error
			for _, b := range pending {
				errs = append(errs, fmt.Errorf("%s/readyz: %w", b, lastErr[b]))
			}
			return fmt.Errorf("stockclient: replicas not ready: %w (%w)", context.Cause(ctx), errors.Join(errs...))
		case <-tick.C:
		}
	}
}

// do sends call to u, with retries when the client has them and
// Retryable allows, and decodes a 2xx answer into out (*[]byte takes it
// raw). It returns the answer's headers.
func (c *Client) do(ctx context.Context, call Call, u string, body any, out any, opts ...callOpts) (http.Header, error) {
	method := call.Method
	var payload []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("stockclient: %s %s: %w", method, u, err)
		}
		payload = b
	}
	attempts := 1
	if c.retry != nil {
		attempts = c.retry.Attempts
		c.budget.request()
	}
	for attempt := 1; ; attempt++ {
		h, err := c.once(ctx, call, u, payload, out, opts...)
		if err == nil || attempt >= attempts || ctx.Err() != nil || !Retryable(call, err) || !c.budget.retry() {
			return h, err
		}
		wait := c.backoff(attempt)
		if ra, ok := RetryAfter(err); ok {
			wait = max(wait, ra+rand.N(ra/2+1))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return h, err
		case <-t.C:
		}
	}
}

// backoff is the jittered wait before attempt+1: half of Base·2^(attempt-1)
// (at most Max) plus a random part of the same size.
func (c *Client) backoff(attempt int) time.Duration {
	d := c.retry.Base << (attempt - 1)
	if d > c.retry.Max || d <= 0 {
		d = c.retry.Max
	}
	return d/2 + rand.N(d/2+1)
}

// once sends one request.
func (c *Client) once(ctx context.Context, call Call, u string, payload []byte, out any, opts ...callOpts) (http.Header, error) {
	method := call.Method
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("stockclient: %w", err)
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if (method == http.MethodPut || call.Route == RouteRestock) && c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for _, o := range opts {
		if o.key != "" {
			req.Header.Set("Idempotency-Key", o.key)
		}
		if o.ifMatch != "" {
			req.Header.Set("If-Match", o.ifMatch)
		}
		if o.prefer != "" {
			req.Header.Set("Prefer", o.prefer)
		}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("stockclient: %w", err)
	}
	defer resp.Body.Close()
	for _, o := range opts {
		if o.status != nil {
			*o.status = resp.StatusCode
		}
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return resp.Header, fmt.Errorf("stockclient: %s %s: reading the answer: %w", method, u, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.Header, answerError(method, u, resp, b)
	}
	switch o := out.(type) {
	case nil:
	case *[]byte:
		*o = b
	default:
		if err := json.Unmarshal(b, out); err != nil {
			return resp.Header, fmt.Errorf("stockclient: %s %s: decoding the answer: %w", method, u, err)
		}
	}
	return resp.Header, nil
}

// answerError makes the *Error of a non-2xx answer. Its code is taken
// only from an answer that is provably the service's: with the X-Replica
// header, and a JSON error naming the same replica. A gateway's 503
// {"error":"Service Unavailable"} is not: the request may have reached
// the service, and must not be taken for its "nothing changed".
func answerError(method, u string, resp *http.Response, body []byte) *Error {
	e := &Error{Status: resp.StatusCode, Method: method, URL: u, Replica: resp.Header.Get("X-Replica")}
	var w stockapi.ErrorBody
	if json.Unmarshal(body, &w) == nil && w.Code != "" && e.Replica != "" && w.Replica == e.Replica {
		e.Code, e.Message, e.SKU, e.Strategy = w.Code, w.Message, w.SKU, w.Strategy
		e.Stock, e.Qty, e.Checks = w.Stock, w.Qty, w.Checks
	} else {
		if len(body) > 300 {
			body = body[:300]
		}
		e.Body = string(body)
	}
	e.RetryAfter, _ = parseRetryAfter(resp.Header)
	return e
}

// parseRetryAfter returns the Retry-After of an answer, in seconds.
func parseRetryAfter(h http.Header) (time.Duration, bool) {
	s, err := strconv.Atoi(h.Get("Retry-After"))
	if err != nil || s <= 0 {
		return 0, false
	}
	return time.Duration(s) * time.Second, true
}
