package stockclient_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/stockclient"
)

// TestHoldsRetry: the client retries a hold's create only with its
// Idempotency-Key, and a confirm always (it is idempotent by the hold's
// id), after answers a gateway lost: one hold, one order. A release of a
// confirmed hold is final.
func TestHoldsRetry(t *testing.T) {
	base := replica(t, nil)
	ctx := t.Context()
	c := stockclient.New(base, stockclient.WithAdminToken(adminToken))
	if _, err := c.PutItem(ctx, "h-1", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateHold(ctx, "h-1", 1, 500*time.Millisecond, "atomic"); !errors.Is(err, stockclient.ErrInvalidTTL) {
		t.Fatalf("a ttl of 500ms: %v; want invalid_ttl", err)
	}
	if _, err := c.CreateHold(ctx, "h-1", 1, time.Minute, "optimistic"); !errors.Is(err, stockclient.ErrHoldsUnsupported) {
		t.Fatalf("optimistic: %v; want holds_unsupported", err)
	}

	// Keyed, a create whose answer is lost is sent again and replayed.
	gw := newGateway(t, base, only(http.MethodPost, "/holds"), gatewayHangUp, 1, nil)
	key := stockclient.NewIdempotencyKey()
	h, err := retrying(gw.URL).CreateHold(ctx, "h-1", 1, time.Minute, "atomic", stockclient.IdempotencyKey(key))
	if err != nil || !h.Replayed || h.State != "held" || gw.forwarded.Load() != 2 {
		t.Fatalf("keyed create whose answer was lost: %+v, %v after %d sends; want the hold replayed after 2", h, err, gw.forwarded.Load())
	}
	// Without a key, a gateway's 503 is not the service's "nothing
	// changed": no retry.
	gw503 := newGateway(t, base, only(http.MethodPost, "/holds"), gatewayJSON503, 1, nil)
	if _, err := retrying(gw503.URL).CreateHold(ctx, "h-1", 1, time.Minute, "atomic"); err == nil || gw503.forwarded.Load() != 1 {
		t.Fatalf("unkeyed create behind a gateway's 503: %v after %d sends; want the error after 1", err, gw503.forwarded.Load())
	}
	if it, err := c.GetItem(ctx, "h-1"); err != nil || it.Stock != 1 || it.Held != 2 {
		t.Fatalf("item: %+v, %v; want stock 1, held 2: two holds", it, err)
	}

	// A confirm whose answer is lost is sent again, key or not.
	gwc := newGateway(t, base, only(http.MethodPost, "/confirm"), gatewayHangUp, 1, nil)
	s, err := retrying(gwc.URL).ConfirmHold(ctx, "h-1", h.ID)
	if err != nil || !s.Replayed || s.OrderID != h.ID || gwc.forwarded.Load() != 2 {
		t.Fatalf("confirm whose answer was lost: %+v, %v after %d sends", s, err, gwc.forwarded.Load())
	}
	orders, err := c.AllOrders(ctx, "h-1", time.Time{})
	if err != nil || len(orders) != 1 || orders[0].ID != h.ID {
		t.Fatalf("ledger: %+v, %v; want the one order %s", orders, err, h.ID)
	}
	if s.Remaining != nil || orders[0].Remaining != nil {
		t.Fatalf("a confirm's sale and order have remaining %v and %v; want nil, as stockapi.Sale.Remaining says", s.Remaining, orders[0].Remaining)
	}
	_, err = retrying(base).ReleaseHold(ctx, "h-1", h.ID)
	if !errors.Is(err, stockclient.ErrHoldConfirmed) || stockclient.Retryable(stockclient.Call{Method: http.MethodPost, Route: stockclient.RouteRelease}, err) {
		t.Fatalf("release of a confirmed hold: %v; want hold_confirmed, not retried", err)
	}
	if got, err := c.GetHold(ctx, "h-1", h.ID); err != nil || got.State != "confirmed" || got.OrderID != h.ID {
		t.Fatalf("GetHold: %+v, %v", got, err)
	}
	if _, err := c.GetHold(ctx, "h-1", "nope"); !errors.Is(err, stockclient.ErrHoldNotFound) {
		t.Fatalf("an unknown hold: %v", err)
	}
}
