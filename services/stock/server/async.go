package server

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/pkg/inventory/mongostore"
	"github.com/stocklock/stocklock/pkg/stockapi"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// Error codes of a queued order's poll (docs/api.md).
const (
	codeInvalidOrderID = "invalid_order_id"
	codeOrderNotFound  = "order_not_found"
)

// respondAsync is the preference (RFC 7240) of a buyer that wants the
// answer 202 with the order to poll instead of waiting for the sale.
const respondAsync = "respond-async"

// prefersAsync reports whether the request's Prefer headers hold
// respond-async: preferences are comma-separated, each a token (matched
// without regard to case) with an optional value and parameters. A
// malformed or unknown preference is ignored, as RFC 7240 asks.
func prefersAsync(h http.Header) bool {
	for _, v := range h.Values("Prefer") {
		for p := range strings.SplitSeq(v, ",") {
			name, _, _ := strings.Cut(p, ";")
			name, _, _ = strings.Cut(name, "=")
			if strings.EqualFold(strings.TrimSpace(name), respondAsync) {
				return true
			}
		}
	}
	return false
}

// orderPath is the URL path of order id of sku: where it is polled.
func orderPath(sku, id string) string {
	return "/v1/items/" + url.PathEscape(sku) + "/orders/" + url.PathEscape(id)
}

// decrementAsync takes req into queued's log and answers 202 with the
// order to poll, once the stream has acknowledged it; a keyed retry
// answers the first request's order as a poll would (sent is the
// strategy as sent, for the key's fingerprint).
func (s *Server) decrementAsync(c echo.Context, req inventory.Request, sent string) error {
	st, replayed, err := s.queued.DecrementAsync(c.Request().Context(), req, sent+"\x00"+respondAsync)
	if err == nil {
		err = st.Err
	}
	if err != nil {
		e, result := decrementError(err)
		s.metrics.decrement(strategy.Queued, result, false)
		e.SKU, e.Strategy = req.SKU, strategy.Queued
		return e
	}
	if replayed {
		c.Response().Header().Set(headerReplayed, "true")
	}
	if st.Sold {
		s.metrics.decrement(strategy.Queued, "replayed", st.Sale.LedgerErr != nil)
		return c.JSON(http.StatusOK, answerOf(st.Sale))
	}
	s.metrics.decrement(strategy.Queued, "queued", false)
	h := c.Response().Header()
	h.Set("Preference-Applied", respondAsync)
	h.Set("Location", orderPath(req.SKU, st.Order.ID))
	h.Set("Retry-After", "1")
	return c.JSON(http.StatusAccepted, s.queuedOf(st.Order))
}

// queuedOf is o, queued, as the API shows it.
func (s *Server) queuedOf(o inventory.Order) stockapi.QueuedOrder {
	return stockapi.QueuedOrder{
		OrderID: o.ID, SKU: o.SKU, Qty: o.Qty, Strategy: o.Strategy, State: stockapi.OrderQueued,
		Replica: o.Replica, At: o.At, IdempotencyKey: o.Key,
	}
}

// getOrder tells what became of an order: GET /v1/items/:sku/orders/:order_id.
// 200 with the sale, as its waiting buyer's answer; the error that buyer
// would have got for a refused one; 202 while it waits in queued's log.
func (s *Server) getOrder(c echo.Context) error {
	sku, aerr := sku(c)
	if aerr != nil {
		return aerr
	}
	id := c.Param("order_id")
	if !inventory.ValidOrderID(id) {
		return newError(http.StatusBadRequest, codeInvalidOrderID, fmt.Sprintf("order id %q: want 1 to 64 of A-Z a-z 0-9 _ -", id))
	}
	st, err := s.adminStore.OrderState(c.Request().Context(), sku, id)
	switch {
	case errors.Is(err, mongostore.ErrOrderNotFound):
		e := newError(http.StatusNotFound, codeOrderNotFound, "the item has no order with this id: none was sold, and none waits in the queue")
		e.SKU = sku
		return e
	case err != nil:
		return storeError(err, sku)
	case st.Err != nil:
		e, _ := decrementError(st.Err)
		e.SKU, e.Strategy = sku, st.Order.Strategy
		return e
	case st.Sold:
		return c.JSON(http.StatusOK, answerOf(st.Sale))
	}
	c.Response().Header().Set("Retry-After", "1")
	return c.JSON(http.StatusAccepted, s.queuedOf(st.Order))
}
