package stockclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Error is an answer of the service with a status other than 2xx. Code is
// the service's error code (the "error" field; "" when the answer was not
// the service's, such as a proxy's 502, whose text is then in Body).
// Branch on Code, with errors.Is and the Err variables, never on Message.
type Error struct {
	Status  int
	Code    string
	Message string
	Replica string // the replica that answered
	// SKU and Strategy name the item and the strategy, when the error is
	// about them.
	SKU      string
	Strategy string
	// Stock and Qty explain a sold_out: what was left, what was asked.
	Stock *int64
	Qty   *int64
	// Checks explains a not_ready: each dependency's state, "ok" or
	// "failing".
	Checks map[string]string
	// RetryAfter is the answer's Retry-After, 0 without one.
	RetryAfter time.Duration

	Method, URL string
	// Body is the answer's text when it was not an error of the service.
	Body string
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "stockclient: %s %s: %d", e.Method, e.URL, e.Status)
	switch {
	case e.Code != "":
		fmt.Fprintf(&b, " %s: %s", e.Code, e.Message)
	case e.Body != "":
		fmt.Fprintf(&b, " %s", strings.TrimSpace(e.Body))
	default:
		fmt.Fprintf(&b, " %s", http.StatusText(e.Status))
	}
	return b.String()
}

// Is reports whether target is the sentinel of e's code, so that
// errors.Is(err, stockclient.ErrSoldOut) tells a sold_out apart.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.sentinel() && t.Code == e.Code
}

// sentinel reports whether e is one of the Err variables: a code alone.
func (e *Error) sentinel() bool { return e.Status == 0 && e.Code != "" && e.URL == "" }

func code(c string) *Error { return &Error{Code: c} }

// The service's error codes, for errors.Is. Their statuses and meanings are
// in the service's OpenAPI document (GET /openapi.json) and docs/api.md.
var (
	ErrUnknownParameter      = code("unknown_parameter")
	ErrInvalidSKU            = code("invalid_sku")
	ErrInvalidIdempotencyKey = code("invalid_idempotency_key")
	ErrInvalidPrecondition   = code("invalid_precondition")
	ErrUnsupportedMediaType  = code("unsupported_media_type")
	ErrBodyTooLarge          = code("body_too_large")
	ErrInvalidJSON           = code("invalid_json")
	ErrInvalidType           = code("invalid_type")
	ErrDuplicateField        = code("duplicate_field")
	ErrUnknownField          = code("unknown_field")
	ErrUnknownStrategy       = code("unknown_strategy")
	ErrStrategyDisabled      = code("strategy_disabled")
	ErrStrategyUnavailable   = code("strategy_unavailable")
	ErrMissingField          = code("missing_field")
	ErrInvalidQty            = code("invalid_qty")
	ErrInvalidStock          = code("invalid_stock")
	ErrInvalidSince          = code("invalid_since")
	ErrInvalidLimit          = code("invalid_limit")
	ErrInvalidCursor         = code("invalid_cursor")
	ErrUnauthorized          = code("unauthorized")
	ErrNotFound              = code("not_found")
	ErrMethodNotAllowed      = code("method_not_allowed")
	ErrVersionMismatch       = code("version_mismatch")
	ErrIdempotencyKeyReused  = code("idempotency_key_reused")
	ErrIdempotencyInProgress = code("idempotency_in_progress")
	ErrSoldOut               = code("sold_out")
	ErrAttemptAbandoned      = code("attempt_abandoned")
	ErrLockUnavailable       = code("lock_unavailable")
	ErrLeaseLost             = code("lease_lost")
	ErrFenced                = code("fenced")
	ErrStaleRead             = code("stale_read")
	ErrConflict              = code("conflict")
	ErrTimeout               = code("timeout")
	ErrStoreUnavailable      = code("store_unavailable")
	ErrShuttingDown          = code("shutting_down")
	ErrNotReady              = code("not_ready")
	ErrOutcomeUnknown        = code("outcome_unknown")
	ErrInternal              = code("internal")
)

// Codes are the codes of the Err variables.
var Codes = func() []string {
	var out []string
	for _, e := range []*Error{
		ErrUnknownParameter, ErrInvalidSKU, ErrInvalidIdempotencyKey, ErrInvalidPrecondition, ErrUnsupportedMediaType,
		ErrBodyTooLarge, ErrInvalidJSON, ErrInvalidType, ErrDuplicateField, ErrUnknownField, ErrUnknownStrategy,
		ErrStrategyDisabled, ErrStrategyUnavailable, ErrMissingField, ErrInvalidQty, ErrInvalidStock, ErrInvalidSince,
		ErrInvalidLimit, ErrInvalidCursor, ErrUnauthorized, ErrNotFound, ErrMethodNotAllowed, ErrVersionMismatch,
		ErrIdempotencyKeyReused, ErrIdempotencyInProgress, ErrSoldOut, ErrAttemptAbandoned, ErrLockUnavailable,
		ErrLeaseLost, ErrFenced, ErrStaleRead, ErrConflict, ErrTimeout, ErrStoreUnavailable, ErrShuttingDown,
		ErrNotReady, ErrOutcomeUnknown, ErrInternal,
	} {
		out = append(out, e.Code)
	}
	return out
}()

// Retryable reports whether sending the same request again is safe and
// may succeed. idempotent says whether the request may be applied twice
// without harm: a read, a PUT, or a decrement with an Idempotency-Key. A
// decrement without a key is never retried after an answer that may hide
// a sale: it could buy twice.
//
//   - A 503 of the service (it names its code), except
//     strategy_unavailable: nothing was changed, and a retry may succeed
//     (safe for any request).
//   - 409 idempotency_in_progress: the first request with the key is
//     still running; asking again gets its sale.
//   - 500 outcome_unknown, no answer at all (a lost connection, the
//     attempt's own timeout), and a 5xx that is not the service's (a
//     proxy's 502, 503 or 504: the request may have reached the service):
//     only idempotent requests.
//   - A cancelled context, and everything else, sold_out and the other 4xx
//     included: no.
//
// The client's retries also stop when the call's context is done.
func Retryable(err error, idempotent bool) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var e *Error
	if !errors.As(err, &e) {
		return idempotent
	}
	switch {
	case e.Code == "":
		return idempotent && e.Status >= 500
	case e.Status == http.StatusServiceUnavailable:
		return e.Code != ErrStrategyUnavailable.Code
	case e.Code == ErrIdempotencyInProgress.Code:
		return true
	case e.Code == ErrOutcomeUnknown.Code:
		return idempotent
	}
	return false
}

// RetryAfter returns the Retry-After of err's answer, if it had one.
func RetryAfter(err error) (time.Duration, bool) {
	var e *Error
	if errors.As(err, &e) && e.RetryAfter > 0 {
		return e.RetryAfter, true
	}
	return 0, false
}
