package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/pkg/stockapi"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// Error codes of holds (docs/api.md).
const (
	codeInvalidTTL       = "invalid_ttl"
	codeInvalidHoldID    = "invalid_hold_id"
	codeHoldNotFound     = "hold_not_found"
	codeHoldExpired      = "hold_expired"
	codeHoldReleased     = "hold_released"
	codeHoldConfirmed    = "hold_confirmed"
	codeHoldsUnsupported = "holds_unsupported"
)

func (s *Server) holdAnswer(c echo.Context, status int, h inventory.Hold) error {
	r := stockapi.Hold{
		ID: h.ID, SKU: h.SKU, Qty: h.Qty, State: h.State, Strategy: h.Strategy, Replica: s.cfg.Replica,
		CreatedAt: h.Created, ExpiresAt: h.Expires, Fence: h.Fence, Key: h.Key,
	}
	if h.State == inventory.HoldConfirmed {
		r.OrderID, r.ConfirmedAt = h.ID, h.ConfirmedAt
	}
	return c.JSON(status, r)
}

// holdError maps an error of a hold's create, confirm, release or read.
func holdError(err error, sku, id string) *apiError {
	var e *apiError
	switch {
	case errors.Is(err, inventory.ErrHoldNotFound):
		e = newError(http.StatusNotFound, codeHoldNotFound, "this item has no hold with this id")
	case errors.Is(err, inventory.ErrHoldExpired):
		e = newError(http.StatusConflict, codeHoldExpired,
			"the hold expired by the store's clock before this confirm reached it (or its units were already returned to the stock): nothing was sold; its units are for sale again")
	case errors.Is(err, inventory.ErrHoldReleased):
		e = newError(http.StatusConflict, codeHoldReleased, "the hold was released: its units went back to the stock; nothing was sold")
	case errors.Is(err, inventory.ErrHoldConfirmed):
		e = newError(http.StatusConflict, codeHoldConfirmed, "the hold was confirmed: its units are sold, and cannot be released")
	case errors.Is(err, inventory.ErrHoldsUnsupported):
		e = newError(http.StatusNotImplemented, codeHoldsUnsupported,
			"the item's stock is split across the buckets strategy's documents, and a hold takes from the item's own stock only; nothing was changed")
	case errors.Is(err, inventory.ErrOutcomeUnknown):
		e = newError(http.StatusInternalServerError, codeOutcomeUnknown,
			"the write got no answer: it may or may not have been applied. A confirm or a release may be sent again (each is idempotent); a create only with the same Idempotency-Key")
		e.cause = err
	default:
		e, _ = decrementError(err)
	}
	e.SKU = sku
	if id != "" && e.Code == codeInvalidQty {
		e.Code = codeInvalidHoldID
	}
	return e
}

// holdID returns the path's hold id, or a 400.
func holdID(c echo.Context) (string, *apiError) {
	id := c.Param("id")
	if !inventory.HoldID(id) {
		return "", newError(http.StatusBadRequest, codeInvalidHoldID, fmt.Sprintf("hold id %q: want 1 to 64 of A-Z a-z 0-9 _ -", id))
	}
	return id, nil
}

// createHold holds units for a while: POST /v1/items/:sku/holds
// {"qty": n, "ttl_ms": t, "strategy": "..."}, optionally with an
// Idempotency-Key.
func (s *Server) createHold(c echo.Context) error {
	sku, aerr := sku(c)
	if aerr != nil {
		return aerr
	}
	key, aerr := idempotencyKey(c)
	if aerr != nil {
		return aerr
	}
	fields, aerr := decodeObject(c, holdRequestFields...)
	if aerr != nil {
		return aerr
	}
	name, aerr := s.strategyField(fields)
	if aerr != nil {
		return aerr
	}
	_, ok := s.strategies[name]
	info, known := strategy.Lookup(name)
	if !ok && known {
		return strategyNotOffered(info)
	}
	if !ok {
		e := newError(http.StatusBadRequest, codeUnknownStrategy, fmt.Sprintf("unknown strategy %q: want one of %v", name, strategy.Names()))
		e.Strategy = name
		return e
	}
	holder, isHolder := s.holders[name]
	if !info.Holds || !isHolder {
		e := newError(http.StatusNotImplemented, codeHoldsUnsupported,
			fmt.Sprintf("strategy %q takes no part in holds (docs/holds.md says why); these do: %v; nothing was changed",
				name, strategy.NamesOf(func(in strategy.Info) bool { return in.Holds })))
		e.Strategy = name
		return e
	}
	qty, aerr := integerField(fields, "qty", codeInvalidQty)
	if aerr != nil {
		return aerr
	}
	if qty <= 0 || qty > s.cfg.MaxQty {
		return newError(http.StatusBadRequest, codeInvalidQty, fmt.Sprintf(`"qty" must be from 1 to %d, got %d`, s.cfg.MaxQty, qty))
	}
	ttlMS, aerr := integerField(fields, "ttl_ms", codeInvalidTTL)
	if aerr != nil {
		return aerr
	}
	ttl := time.Duration(ttlMS) * time.Millisecond
	if ttlMS < inventory.MinHoldTTL.Milliseconds() || ttlMS > inventory.MaxHoldTTL.Milliseconds() {
		return newError(http.StatusBadRequest, codeInvalidTTL, fmt.Sprintf(`"ttl_ms" must be from %d to %d, got %d`,
			inventory.MinHoldTTL.Milliseconds(), inventory.MaxHoldTTL.Milliseconds(), ttlMS))
	}
	req := inventory.HoldRequest{SKU: sku, Qty: qty, TTL: ttl, Key: key}
	ctx := c.Request().Context()
	var (
		h        inventory.Hold
		replayed bool
		err      error
	)
	if key != "" {
		sent, _, _ := stringField(fields, "strategy")
		h, replayed, err = s.store.HoldOnce(ctx, holder, req, sent)
	} else {
		h, err = holder.Hold(ctx, req)
	}
	if err != nil {
		e := holdError(err, sku, "")
		e.Strategy = name
		return e
	}
	if replayed {
		c.Response().Header().Set(headerReplayed, "true")
	}
	return s.holdAnswer(c, http.StatusCreated, h)
}

// getHold reads a hold: GET /v1/items/:sku/holds/:id. Its state is
// settled by the store's clock: a hold past its expiry reads as expired.
func (s *Server) getHold(c echo.Context) error {
	sku, id, aerr := skuAndHold(c)
	if aerr != nil {
		return aerr
	}
	h, err := s.store.GetHold(c.Request().Context(), sku, id)
	if err != nil {
		return holdError(err, sku, id)
	}
	return s.holdAnswer(c, http.StatusOK, h)
}

// confirmHold sells a hold's units: POST /v1/items/:sku/holds/:id/confirm,
// no body, optionally with an Idempotency-Key (recorded in the order). A
// confirm of a confirmed hold answers its order again, replayed.
func (s *Server) confirmHold(c echo.Context) error {
	sku, id, aerr := skuAndHold(c)
	if aerr != nil {
		return aerr
	}
	key, aerr := idempotencyKey(c)
	if aerr != nil {
		return aerr
	}
	sale, replayed, err := s.store.ConfirmHold(c.Request().Context(), sku, id, key)
	if err != nil {
		return holdError(err, sku, id)
	}
	if replayed {
		c.Response().Header().Set(headerReplayed, "true")
	}
	return c.JSON(http.StatusOK, answerOf(sale))
}

// releaseHold gives a hold's units back: POST /v1/items/:sku/holds/:id/release,
// no body. Releasing a released or expired hold answers it as it is.
func (s *Server) releaseHold(c echo.Context) error {
	sku, id, aerr := skuAndHold(c)
	if aerr != nil {
		return aerr
	}
	h, err := s.store.ReleaseHold(c.Request().Context(), sku, id)
	if err != nil {
		return holdError(err, sku, id)
	}
	return s.holdAnswer(c, http.StatusOK, h)
}

// recoverHolds tidies the holds (see mongostore.Store.RecoverHolds).
func (s *Server) recoverHolds(ctx context.Context) {
	if _, err := s.bgStore.RecoverHolds(ctx); err != nil && ctx.Err() == nil {
		s.logger.Warn("tidying holds failed; retrying at the next interval (holds are correct without it)", slog.Any("error", err))
	}
}

// skuAndHold reads a hold route's sku and hold id.
func skuAndHold(c echo.Context) (string, string, *apiError) {
	sku, aerr := sku(c)
	if aerr != nil {
		return "", "", aerr
	}
	id, aerr := holdID(c)
	if aerr != nil {
		return "", "", aerr
	}
	return sku, id, nil
}
