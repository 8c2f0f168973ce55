package stockclient

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Error is an answer with a status other than 2xx. Code is the service's
// error code: the "error" field of an answer that is provably the
// service's, one that carries the X-Replica header every replica sets and
// names the same replica in its body. Any other answer, such as a proxy's
// 502 or a gateway's 503 {"error":"Service Unavailable"}, has Code "" and
// its text in Body: the request may have reached the service. Branch on
// Code, with errors.Is and the Err variables, never on Message.
type Error struct {
	Status  int
	Code    string
	Message string
	Replica string // the replica that answered (its X-Replica header); "" when not the service's
	// SKU and Strategy name the item and the strategy, when the error is
	// about them.
	SKU      string
	Strategy string
	// Stock and Qty explain a sold_out or an insufficient_stock: what was
	// left, what was asked.
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
	ErrInsufficientStock     = code("insufficient_stock")
	ErrAttemptAbandoned      = code("attempt_abandoned")
	ErrLockUnavailable       = code("lock_unavailable")
	ErrLeaseLost             = code("lease_lost")
	ErrFenced                = code("fenced")
	ErrStaleRead             = code("stale_read")
	ErrConflict              = code("conflict")
	ErrTimeout               = code("timeout")
	ErrStoreUnavailable      = code("store_unavailable")
	ErrShuttingDown          = code("shutting_down")
	ErrOverloaded            = code("overloaded")
	ErrNotReady              = code("not_ready")
	ErrOutcomeUnknown        = code("outcome_unknown")
	ErrInternal              = code("internal")
	ErrInvalidTTL            = code("invalid_ttl")
	ErrInvalidHoldID         = code("invalid_hold_id")
	ErrHoldNotFound          = code("hold_not_found")
	ErrHoldExpired           = code("hold_expired")
	ErrHoldReleased          = code("hold_released")
	ErrHoldConfirmed         = code("hold_confirmed")
	ErrHoldsUnsupported      = code("holds_unsupported")
	ErrInvalidOrderID        = code("invalid_order_id")
	ErrOrderNotFound         = code("order_not_found")
)

// Rule is what an answer says about sending the same request again
// (docs/api.md, "What a client may retry").
type Rule int

const (
	// Stop: a final answer (every 4xx, strategy_unavailable). Sending
	// the request again gets the same answer.
	Stop Rule = iota
	// Again: the service changed nothing, and a retry may succeed (the
	// 503s but strategy_unavailable, idempotency_in_progress). Safe for
	// any request.
	Again
	// IfIdempotent: the request may or may not have been applied
	// (outcome_unknown, internal; and no answer, or one that is not the
	// service's). Send it again only if applying it twice is harmless: a
	// read, or a decrement or restock with its Idempotency-Key; never a
	// PUT, which would erase the sales made in between, nor a decrement
	// without a key, which could sell twice.
	IfIdempotent
)

// rule is a code's status and what it says about retrying.
type rule struct {
	status int
	rule   Rule
}

// rules holds every code of the contract with the status the service
// answers it with. A service answer whose code or status is not here is
// judged as no answer at all (IfIdempotent for a 5xx).
var rules = func() map[string]rule {
	m := map[string]rule{}
	for _, r := range []struct {
		e      *Error
		status int
		rule   Rule
	}{
		{ErrUnknownParameter, http.StatusBadRequest, Stop},
		{ErrInvalidSKU, http.StatusBadRequest, Stop},
		{ErrInvalidIdempotencyKey, http.StatusBadRequest, Stop},
		{ErrInvalidPrecondition, http.StatusBadRequest, Stop},
		{ErrUnsupportedMediaType, http.StatusUnsupportedMediaType, Stop},
		{ErrBodyTooLarge, http.StatusRequestEntityTooLarge, Stop},
		{ErrInvalidJSON, http.StatusBadRequest, Stop},
		{ErrInvalidType, http.StatusBadRequest, Stop},
		{ErrDuplicateField, http.StatusBadRequest, Stop},
		{ErrUnknownField, http.StatusBadRequest, Stop},
		{ErrUnknownStrategy, http.StatusBadRequest, Stop},
		{ErrStrategyDisabled, http.StatusForbidden, Stop},
		{ErrStrategyUnavailable, http.StatusServiceUnavailable, Stop},
		{ErrMissingField, http.StatusBadRequest, Stop},
		{ErrInvalidQty, http.StatusBadRequest, Stop},
		{ErrInvalidStock, http.StatusBadRequest, Stop},
		{ErrInvalidSince, http.StatusBadRequest, Stop},
		{ErrInvalidLimit, http.StatusBadRequest, Stop},
		{ErrInvalidCursor, http.StatusBadRequest, Stop},
		{ErrUnauthorized, http.StatusUnauthorized, Stop},
		{ErrNotFound, http.StatusNotFound, Stop},
		{ErrMethodNotAllowed, http.StatusMethodNotAllowed, Stop},
		{ErrVersionMismatch, http.StatusPreconditionFailed, Stop},
		{ErrIdempotencyKeyReused, http.StatusUnprocessableEntity, Stop},
		{ErrIdempotencyInProgress, http.StatusConflict, Again},
		{ErrSoldOut, http.StatusConflict, Stop},
		{ErrInsufficientStock, http.StatusConflict, Stop},
		{ErrAttemptAbandoned, http.StatusServiceUnavailable, Again},
		{ErrLockUnavailable, http.StatusServiceUnavailable, Again},
		{ErrLeaseLost, http.StatusServiceUnavailable, Again},
		{ErrFenced, http.StatusServiceUnavailable, Again},
		{ErrStaleRead, http.StatusServiceUnavailable, Again},
		{ErrConflict, http.StatusServiceUnavailable, Again},
		{ErrTimeout, http.StatusServiceUnavailable, Again},
		{ErrStoreUnavailable, http.StatusServiceUnavailable, Again},
		{ErrShuttingDown, http.StatusServiceUnavailable, Again},
		{ErrOverloaded, http.StatusServiceUnavailable, Again},
		{ErrNotReady, http.StatusServiceUnavailable, Again},
		{ErrOutcomeUnknown, http.StatusInternalServerError, IfIdempotent},
		{ErrInternal, http.StatusInternalServerError, IfIdempotent},
		{ErrInvalidTTL, http.StatusBadRequest, Stop},
		{ErrInvalidHoldID, http.StatusBadRequest, Stop},
		{ErrHoldNotFound, http.StatusNotFound, Stop},
		{ErrHoldExpired, http.StatusConflict, Stop},
		{ErrHoldReleased, http.StatusConflict, Stop},
		{ErrHoldConfirmed, http.StatusConflict, Stop},
		{ErrHoldsUnsupported, http.StatusNotImplemented, Stop},
		{ErrInvalidOrderID, http.StatusBadRequest, Stop},
		{ErrOrderNotFound, http.StatusNotFound, Stop},
	} {
		m[r.e.Code] = rule{r.status, r.rule}
	}
	return m
}()

// Codes are the codes of the Err variables.
var Codes = slices.Sorted(maps.Keys(rules))

// The routes of the service, as its OpenAPI document names them.
const (
	RouteItem      = "/v1/items/{sku}"
	RouteDecrement = "/v1/items/{sku}/decrement"
	RouteRestock   = "/v1/items/{sku}/restock"
	RouteOrders    = "/v1/items/{sku}/orders"
	RouteOrder     = "/v1/items/{sku}/orders/{order_id}"
	RouteHolds     = "/v1/items/{sku}/holds"
	RouteHold      = "/v1/items/{sku}/holds/{id}"
	RouteConfirm   = "/v1/items/{sku}/holds/{id}/confirm"
	RouteRelease   = "/v1/items/{sku}/holds/{id}/release"
	RouteHealthz   = "/healthz"
	RouteReadyz    = "/readyz"
	RouteMetrics   = "/metrics"
	RouteOpenAPI   = "/openapi.json"
)

// Call is a request as Retryable judges it.
type Call struct {
	Method string // GET, PUT, POST
	Route  string // one of the Route constants
	Keyed  bool   // it carries an Idempotency-Key
}

// Idempotent reports whether applying the request twice is harmless: a
// read, a decrement, a restock or a hold's create with an
// Idempotency-Key, a hold's confirm or release. A PUT is not:
// sent twice with a sale in between, the second erases the sale.
func (c Call) Idempotent() bool {
	switch {
	case c.Method == http.MethodGet:
		return true
	case c.Method == http.MethodPost && (c.Route == RouteDecrement || c.Route == RouteRestock || c.Route == RouteHolds):
		return c.Keyed
	case c.Method == http.MethodPost && (c.Route == RouteConfirm || c.Route == RouteRelease):
		// Idempotent by the hold's id: a second confirm answers the
		// first's order, a second release the released hold.
		return true
	}
	return false
}

// RuleOf returns what err, the outcome of one attempt, says about sending
// the same request again: the Rule of its code when it is an answer of
// the service with a code and status of the contract; IfIdempotent for no
// answer (a lost connection, the attempt's own timeout) and for a 5xx
// that is not provably the service's; Stop for anything else (a cancelled
// context, a 4xx that is not the service's).
func RuleOf(err error) Rule {
	if err == nil || errors.Is(err, context.Canceled) {
		return Stop
	}
	var e *Error
	if !errors.As(err, &e) {
		return IfIdempotent
	}
	if r, ok := rules[e.Code]; ok && e.Code != "" && r.status == e.Status {
		return r.rule
	}
	if e.Status >= 500 {
		return IfIdempotent
	}
	return Stop
}

// Retryable reports whether sending call again after err is safe and may
// succeed: err says nothing changed (Again), or it leaves the outcome
// unknown and call is idempotent (IfIdempotent). The client's retries
// (WithRetry) follow it exactly, and stop when the call's context is done.
func Retryable(call Call, err error) bool {
	if call.Route == RouteOrder && errors.Is(err, ErrAttemptAbandoned) {
		// The order's outcome, not this read's: reading it again
		// answers the same. The decrement is what may be sent again.
		return false
	}
	switch RuleOf(err) {
	case Again:
		return true
	case IfIdempotent:
		return call.Idempotent()
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
