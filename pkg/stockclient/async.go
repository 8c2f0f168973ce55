package stockclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/stocklock/stocklock/pkg/stockapi"
)

// QueuedOrder is an order in the queued strategy's log, not decided yet.
type QueuedOrder = stockapi.QueuedOrder

// Outcome is the answer of DecrementAsync and Order: the sale, or the
// order still queued. Exactly one of the two is set; a refused order is
// the call's error, as a waiting buyer's (ErrSoldOut...).
type Outcome struct {
	Sale   *Sale
	Queued *QueuedOrder
	// Location is the path of the order to poll (a 202's Location).
	Location string

	retryAfter time.Duration // a 202's Retry-After: when to poll again
}

// OrderURL is the URL of order id of sku on the replica at base.
func OrderURL(base, sku, id string) string {
	return ItemURL(base, sku) + "/orders/" + url.PathEscape(id)
}

// DecrementAsync asks to sell qty units of sku with strategy, without
// waiting for the sale (Prefer: respond-async): the queued strategy
// answers with the order once it is in its log (Outcome.Queued, to poll
// with Order or AwaitOrder); any other strategy ignores the preference
// and answers the sale (Outcome.Sale). With IdempotencyKey, a retry
// (WithRetry's too) queues nothing more: it answers the first request's
// order, queued, sold (Replayed) or refused.
func (c *Client) DecrementAsync(ctx context.Context, sku string, qty int64, strategy string, opts ...CallOption) (Outcome, error) {
	o := applyOpts(opts)
	o.prefer = "respond-async"
	body := stockapi.DecrementRequest{Qty: qty, Strategy: strategy}
	return c.outcome(ctx, Call{http.MethodPost, RouteDecrement, o.key != ""}, ItemURL(c.base, sku)+"/decrement", body, o)
}

// Order tells what became of order id of sku: sold (Outcome.Sale),
// still queued (Outcome.Queued), or refused: the error its waiting buyer
// would have got (ErrSoldOut, ErrAttemptAbandoned, ErrNotFound).
// ErrOrderNotFound: the item has no such order, sold or queued.
func (c *Client) Order(ctx context.Context, sku, id string) (Outcome, error) {
	return c.outcome(ctx, Call{http.MethodGet, RouteOrder, false}, OrderURL(c.base, sku, id), nil, callOpts{})
}

// AwaitOrder polls order id of sku until it is decided, waiting each
// 202's Retry-After between polls, and returns its sale as the ledger has
// it (a sale not yet Recorded is polled again, a second later) or its
// refusal; ctx bounds the wait.
func (c *Client) AwaitOrder(ctx context.Context, sku, id string) (Sale, error) {
	for {
		out, err := c.Order(ctx, sku, id)
		if err != nil || out.Sale != nil && out.Sale.Recorded {
			return derefSale(out.Sale), err
		}
		wait := out.retryAfter
		if out.Sale != nil {
			wait = time.Second
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return Sale{}, fmt.Errorf("stockclient: order %s of %q still queued: %w", id, sku, context.Cause(ctx))
		case <-t.C:
		}
	}
}

func derefSale(s *Sale) Sale {
	if s == nil {
		return Sale{}
	}
	return *s
}

// outcome sends call and reads its answer: 200 a sale, 202 a queued order.
func (c *Client) outcome(ctx context.Context, call Call, u string, body any, o callOpts) (Outcome, error) {
	var status int
	var raw []byte
	o.status = &status
	h, err := c.do(ctx, call, u, body, &raw, o)
	if err != nil {
		return Outcome{}, err
	}
	replayed := h.Get("Idempotent-Replayed") == "true"
	if status == http.StatusAccepted {
		var q QueuedOrder
		if err := json.Unmarshal(raw, &q); err != nil {
			return Outcome{}, fmt.Errorf("stockclient: %s %s: decoding the answer: %w", call.Method, u, err)
		}
		q.Replayed = replayed
		out := Outcome{Queued: &q, Location: h.Get("Location"), retryAfter: time.Second}
		if out.Location == "" {
			out.Location = OrderURL("", q.SKU, q.OrderID)
		}
		if ra, ok := parseRetryAfter(h); ok {
			out.retryAfter = ra
		}
		return out, nil
	}
	var s Sale
	if err := json.Unmarshal(raw, &s); err != nil {
		return Outcome{}, fmt.Errorf("stockclient: %s %s: decoding the answer: %w", call.Method, u, err)
	}
	s.Replayed = replayed
	return Outcome{Sale: &s}, nil
}
