package stockclient

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/stocklock/stocklock/pkg/stockapi"
)

// HoldURL is the URL of hold id of sku on the replica at base.
func HoldURL(base, sku, id string) string { return ItemURL(base, sku) + "/holds/" + url.PathEscape(id) }

// CreateHold holds qty units of sku for ttl (whole milliseconds, 1 s to 15
// min) with strategy ("" for the replica's default), which must take part
// in holds (ErrHoldsUnsupported otherwise). With IdempotencyKey, retries
// (WithRetry's too) hold at most once, and a retry answers the first
// create's hold; without one, WithRetry sends it again only after an
// answer that says nothing changed.
func (c *Client) CreateHold(ctx context.Context, sku string, qty int64, ttl time.Duration, strategy string, opts ...CallOption) (Hold, error) {
	body := stockapi.HoldRequest{Qty: qty, TTLMS: ttl.Milliseconds(), Strategy: strategy}
	o := applyOpts(opts)
	var h Hold
	hdr, err := c.do(ctx, Call{http.MethodPost, RouteHolds, o.key != ""}, ItemURL(c.base, sku)+"/holds", body, &h, o)
	if err == nil {
		h.Replayed = hdr.Get("Idempotent-Replayed") == "true"
	}
	return h, err
}

// GetHold reads hold id of sku, its state settled by the store's clock.
func (c *Client) GetHold(ctx context.Context, sku, id string) (Hold, error) {
	var h Hold
	_, err := c.do(ctx, Call{http.MethodGet, RouteHold, false}, HoldURL(c.base, sku, id), nil, &h)
	return h, err
}

// ConfirmHold sells the units of hold id of sku: one order, whose id is
// the hold's. It is idempotent (a confirm of a confirmed hold answers its
// order, Replayed), so WithRetry sends it again after a lost answer too.
// ErrHoldExpired: the hold expired by the store's clock before the
// confirm reached it, and nothing was sold. IdempotencyKey's key is
// recorded in the order.
func (c *Client) ConfirmHold(ctx context.Context, sku, id string, opts ...CallOption) (Sale, error) {
	o := applyOpts(opts)
	var s Sale
	hdr, err := c.do(ctx, Call{http.MethodPost, RouteConfirm, o.key != ""}, HoldURL(c.base, sku, id)+"/confirm", nil, &s, o)
	if err == nil {
		s.Replayed = hdr.Get("Idempotent-Replayed") == "true"
	}
	return s, err
}

// ReleaseHold gives the units of hold id of sku back to the stock. It is
// idempotent: releasing a released or expired hold answers it as it is.
// ErrHoldConfirmed: it was confirmed, and its units stay sold.
func (c *Client) ReleaseHold(ctx context.Context, sku, id string) (Hold, error) {
	var h Hold
	_, err := c.do(ctx, Call{http.MethodPost, RouteRelease, false}, HoldURL(c.base, sku, id)+"/release", nil, &h)
	return h, err
}
