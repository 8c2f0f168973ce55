package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/pkg/stockapi"
)

// Error codes: the "error" field of every error response. docs/api.md
// lists them with their statuses.
const (
	codeInvalidJSON         = "invalid_json"
	codeInvalidType         = "invalid_type"
	codeUnknownField        = "unknown_field"
	codeMissingField        = "missing_field"
	codeInvalidQty          = "invalid_qty"
	codeInvalidStock        = "invalid_stock"
	codeInvalidSKU          = "invalid_sku"
	codeInvalidSince        = "invalid_since"
	codeUnknownStrategy     = "unknown_strategy"
	codeStrategyUnavailable = "strategy_unavailable"
	codeBodyTooLarge        = "body_too_large"
	codeUnsupportedMedia    = "unsupported_media_type"
	codeNotFound            = "not_found"
	codeMethodNotAllowed    = "method_not_allowed"
	codeSoldOut             = "sold_out"
	codeInsufficientStock   = "insufficient_stock"
	codeLockUnavailable     = "lock_unavailable"
	codeLeaseLost           = "lease_lost"
	codeFenced              = "fenced"
	codeConflict            = "conflict"
	codeStaleRead           = "stale_read"
	codeShuttingDown        = "shutting_down"
	codeOverloaded          = "overloaded"
	codeUnauthorized        = "unauthorized"
	codeStrategyDisabled    = "strategy_disabled"
	codeInvalidLimit        = "invalid_limit"
	codeInvalidCursor       = "invalid_cursor"
	codeVersionMismatch     = "version_mismatch"
	codeInvalidPrecondition = "invalid_precondition"
	codeUnknownParameter    = "unknown_parameter"
	codeDuplicateField      = "duplicate_field"
	codeInvalidKey          = "invalid_idempotency_key"
	codeKeyReused           = "idempotency_key_reused"
	codeKeyInProgress       = "idempotency_in_progress"
	codeAttemptAbandoned    = "attempt_abandoned"
	codeTimeout             = "timeout"
	codeNotReady            = "not_ready"
	codeOutcomeUnknown      = "outcome_unknown"
	codeStoreUnavailable    = "store_unavailable"
	codeInternal            = "internal"
)

// apiError is an error response. Handlers return it; errorHandler writes
// its body, the wire type stockapi.ErrorBody, with its status.
type apiError struct {
	Status int `json:"-"`
	stockapi.ErrorBody

	cause error // logged for 5xx, never sent
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func newError(status int, code, message string) *apiError {
	return &apiError{Status: status, ErrorBody: stockapi.ErrorBody{Code: code, Message: message}}
}

// decrementError maps a strategy's error to its response and the result
// label of the decrements metric.
//
// 409 is sold_out, the one final answer ("stop trying"), and
// idempotency_in_progress, which a client tells apart by its code.
// Everything a retry may fix, and that changed nothing, is 503 with
// Retry-After: the lock was busy, the lease was lost before the write, a
// newer holder fenced this one out, another writer changed the item under
// the lock, or the optimistic retries ran out.
func decrementError(err error) (*apiError, string) {
	var so *inventory.SoldOutError
	switch {
	case errors.As(err, &so):
		e := newError(http.StatusConflict, codeSoldOut, "not enough stock")
		e.Stock, e.Qty = &so.Stock, &so.Qty
		return e, "sold_out"
	case errors.Is(err, inventory.ErrNotFound):
		return newError(http.StatusNotFound, codeNotFound, "no item has this sku"), "not_found"
	case errors.Is(err, inventory.ErrInvalid):
		return newError(http.StatusBadRequest, codeInvalidQty, err.Error()), "invalid"
	case errors.Is(err, inventory.ErrLockUnavailable):
		return unavailable(codeLockUnavailable, "the item's lock could not be acquired within the lock wait budget; nothing was changed", err), "lock_unavailable"
	case errors.Is(err, inventory.ErrLeaseLost):
		return unavailable(codeLeaseLost, "the lock was lost before the stock write; nothing was written", err), "lease_lost"
	case errors.Is(err, inventory.ErrFenced):
		return unavailable(codeFenced, "a newer lock holder fenced this request out; nothing was written", err), "fenced"
	case errors.Is(err, inventory.ErrStale):
		return unavailable(codeStaleRead, "another writer changed the item between this request's read and its write; nothing was written", err), "stale_read"
	case errors.Is(err, inventory.ErrKeyReused):
		return newError(http.StatusUnprocessableEntity, codeKeyReused, "this Idempotency-Key was used for a request with another sku, qty or strategy; nothing was changed"), "key_reused"
	case errors.Is(err, inventory.ErrInProgress):
		e := newError(http.StatusConflict, codeKeyInProgress, "a request with this Idempotency-Key is still in progress; nothing was changed by this one: ask again shortly to get its sale")
		return e, "in_progress"
	case errors.Is(err, inventory.ErrAbandoned):
		return unavailable(codeAttemptAbandoned, "this request's Idempotency-Key attempt was given up (its replica looked dead, or it ran too long) before its stock write, which was refused; nothing was sold by it: retry with the same key", err), "abandoned"
	case errors.Is(err, inventory.ErrConflict):
		return unavailable(codeConflict, "the stock kept changing under every compare-and-set attempt; nothing was written", err), "conflict"
	case errors.Is(err, inventory.ErrOutcomeUnknown):
		// Before the timeout case: a commit that timed out is in doubt,
		// not "nothing written". Not 503: retrying could buy twice.
		e := newError(http.StatusInternalServerError, codeOutcomeUnknown,
			"the stock write got no answer: the sale may or may not have happened, and it is not in the ledger; do not retry blindly")
		e.cause = err
		return e, "outcome_unknown"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return unavailable(codeTimeout, "the request ran out of time before anything was written", err), "timeout"
	case errors.Is(err, inventory.ErrStoreUnavailable):
		return unavailable(codeStoreUnavailable, "MongoDB did not answer before anything was sold; nothing was changed", err), "store_unavailable"
	}
	e := newError(http.StatusInternalServerError, codeInternal, "internal error; see the replica's log")
	e.cause = err
	return e, "error"
}

func unavailable(code, message string, cause error) *apiError {
	e := newError(http.StatusServiceUnavailable, code, message)
	e.cause = cause
	return e
}

// errorHandler writes every error as JSON naming the replica. Errors that
// are not apiErrors (Echo's own 404 and 405, panics) are mapped here.
func (s *Server) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var ae *apiError
	var he *echo.HTTPError
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &he) && he.Code == http.StatusNotFound:
		ae = newError(http.StatusNotFound, codeNotFound, "no such route")
	case errors.As(err, &he) && he.Code == http.StatusMethodNotAllowed:
		ae = newError(http.StatusMethodNotAllowed, codeMethodNotAllowed, "method not allowed on this route")
	case errors.As(err, &he) && he.Code == http.StatusRequestEntityTooLarge:
		ae = newError(http.StatusRequestEntityTooLarge, codeBodyTooLarge, "request body too large")
	default:
		ae = newError(http.StatusInternalServerError, codeInternal, "internal error; see the replica's log")
		ae.cause = err
	}
	ae.Replica = s.cfg.Replica
	if ae.Status >= 500 && ae.cause != nil {
		// A busy lock or a lost CAS race is routine under load; a lost
		// lease or a fenced write means a holder stalled, which someone
		// should hear about; a 500 is a bug or an outage.
		level := slog.LevelDebug
		switch ae.Code {
		case codeLeaseLost, codeFenced:
			level = slog.LevelWarn
		case codeInternal, codeOutcomeUnknown:
			level = slog.LevelError
		}
		s.logger.Log(c.Request().Context(), level, "request failed",
			slog.String("method", c.Request().Method), slog.String("path", c.Request().URL.Path),
			slog.Int("status", ae.Status), slog.String("code", ae.Code), slog.Any("error", ae.cause))
	}
	if (ae.Status == http.StatusServiceUnavailable && ae.Code != codeStrategyUnavailable) || ae.Code == codeKeyInProgress {
		c.Response().Header().Set("Retry-After", "1")
	}
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(ae.Status)
		return
	}
	_ = c.JSON(ae.Status, ae.ErrorBody)
}
