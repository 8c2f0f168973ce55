// Package stockapi is the harness's small client for the stock service's
// calls other than the attack itself: stock resets, read-backs, the order
// ledger, readiness, identity and metrics.
package stockapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/stocklock/stocklock/loadtest/verdict"
)

// Client talks to replicas of the stock service. It is safe for concurrent
// use.
type Client struct {
	hc         *http.Client
	adminToken string // sent with stock changes (PUT)
}

// New returns a client whose calls each time out after timeout; adminToken,
// if not empty, is sent with stock changes.
func New(timeout time.Duration, adminToken string) *Client {
	// Like the attack, talk to the replicas directly, never through an
	// HTTP proxy from the environment.
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 8, IdleConnTimeout: 30 * time.Second}
	return &Client{hc: &http.Client{Timeout: timeout, Transport: tr}, adminToken: adminToken}
}

// HTTPError is a non-2xx answer.
type HTTPError struct {
	Method, URL string
	Code        int
	Body        string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("%s %s: %d %s", e.Method, e.URL, e.Code, strings.TrimSpace(e.Body))
}

func (a *Client) Do(ctx context.Context, method, u string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if method == http.MethodPut && a.adminToken != "" {
		req.Header.Set("Authorization", "Bearer "+a.adminToken)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, u, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		if len(b) > 300 {
			b = b[:300]
		}
		return &HTTPError{Method: method, URL: u, Code: resp.StatusCode, Body: string(b)}
	}
	if out == nil {
		return nil
	}
	switch o := out.(type) {
	case *[]byte:
		*o = b
		return nil
	default:
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decoding the answer: %w", method, u, err)
		}
		return nil
	}
}

// ItemURL is the URL of sku's item on the replica at base.
func ItemURL(base, sku string) string { return base + "/v1/items/" + url.PathEscape(sku) }

// SetStock resets sku's stock with PUT.
func (a *Client) SetStock(ctx context.Context, base, sku string, stock int) error {
	return a.Do(ctx, http.MethodPut, ItemURL(base, sku), map[string]int{"stock": stock}, nil)
}

// Item is an item as GET /v1/items/{sku} returns it.
type Item struct {
	SKU     string `json:"sku"`
	Stock   int    `json:"stock"`
	Version int64  `json:"version"`
	// Pending are the units taken whose orders are not yet in the
	// ledger, by order id.
	Pending map[string]json.RawMessage `json:"pending"`
}

// GetItem reads sku back.
func (a *Client) GetItem(ctx context.Context, base, sku string) (Item, error) {
	var it Item
	err := a.Do(ctx, http.MethodGet, ItemURL(base, sku), nil, &it)
	return it, err
}

// ledgerOrder is one order as the ledger endpoint returns it.
type ledgerOrder struct {
	ID       string          `json:"order_id"`
	SKU      string          `json:"sku"`
	Qty      int             `json:"qty"`
	Replica  string          `json:"replica"`
	Strategy string          `json:"strategy"`
	Fence    json.RawMessage `json:"fence"`
	At       time.Time       `json:"at"`
	Key      string          `json:"key"`
}

// Orders reads the ledger of sku since a time, following its pages. The
// endpoint answers either a bare array or an object with an "orders" array
// and the cursor of the next page.
func (a *Client) Orders(ctx context.Context, base, sku string, since time.Time) ([]verdict.Order, error) {
	first := ItemURL(base, sku) + "/orders?limit=1000&since=" + url.QueryEscape(since.UTC().Format(time.RFC3339Nano))
	var list []ledgerOrder
	for u := first; ; {
		var raw []byte
		if err := a.Do(ctx, http.MethodGet, u, nil, &raw); err != nil {
			return nil, err
		}
		page, next, err := decodeOrders(raw)
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", u, err)
		}
		list = append(list, page...)
		if next == "" {
			break
		}
		u = first + "&after=" + url.QueryEscape(next)
	}
	out := make([]verdict.Order, 0, len(list))
	for _, o := range list {
		out = append(out, verdict.Order{ID: o.ID, SKU: o.SKU, Qty: o.Qty, Replica: o.Replica, Strategy: o.Strategy, Key: o.Key})
	}
	return out, nil
}

func decodeOrders(raw []byte) (list []ledgerOrder, next string, err error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '[' {
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, "", fmt.Errorf("decoding the orders: %w", err)
		}
		return list, "", nil
	}
	var wrapped struct {
		Orders *[]ledgerOrder `json:"orders"`
		Next   string         `json:"next"`
	}
	if err := json.Unmarshal(raw, &wrapped); err != nil {
		return nil, "", fmt.Errorf("decoding the orders: %w", err)
	}
	if wrapped.Orders == nil {
		return nil, "", errors.New(`decoding the orders: neither an array nor an object with "orders"`)
	}
	return *wrapped.Orders, wrapped.Next, nil
}

// ReplicaName asks base's /healthz which replica it is.
func (a *Client) ReplicaName(ctx context.Context, base string) (string, error) {
	var h struct {
		Replica string `json:"replica"`
	}
	if err := a.Do(ctx, http.MethodGet, base+"/healthz", nil, &h); err != nil {
		return "", err
	}
	return h.Replica, nil
}

// Ready asks base's /readyz once.
func (a *Client) Ready(ctx context.Context, base string) error {
	return a.Do(ctx, http.MethodGet, base+"/readyz", nil, nil)
}

// Metrics fetches base's Prometheus text exposition.
func (a *Client) Metrics(ctx context.Context, base string) ([]byte, error) {
	var b []byte
	err := a.Do(ctx, http.MethodGet, base+"/metrics", nil, &b)
	return b, err
}

// WaitReady polls every replica's /readyz until all answer 200, ctx ends
// or timeout passes. progress, if not nil, is told of each still-waiting
// replica about once a second.
func (a *Client) WaitReady(ctx context.Context, bases []string, timeout time.Duration, progress func(string)) error {
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
			err := a.Ready(cctx, b)
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
				errs = append(errs, fmt.Errorf("%s/readyz: %v", b, lastErr[b]))
			}
			return fmt.Errorf("replicas not ready: %w (%w)", context.Cause(ctx), errors.Join(errs...))
		case <-tick.C:
		}
	}
}

// SKUOfURL extracts the sku from .../v1/items/<sku>/..., "" if u is not an
// item URL.
func SKUOfURL(u string) string {
	const marker = "/v1/items/"
	i := strings.Index(u, marker)
	if i < 0 {
		return ""
	}
	rest := u[i+len(marker):]
	if j := strings.IndexByte(rest, '/'); j >= 0 {
		rest = rest[:j]
	}
	if s, err := url.PathUnescape(rest); err == nil {
		return s
	}
	return rest
}
