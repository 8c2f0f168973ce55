package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stocklock/stocklock/pkg/strategy"

	"github.com/labstack/echo/v4"

	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/pkg/stockapi"
)

// Idempotency headers: the request's key, and the marker of a replayed sale.
const (
	headerIdempotencyKey = "Idempotency-Key"
	headerReplayed       = "Idempotent-Replayed"
)

// idempotencyKey returns the request's Idempotency-Key, bare or quoted
// (see unquoteKey), "" when it has none, or a 400 when it is malformed or
// given twice.
func idempotencyKey(c echo.Context) (string, *apiError) {
	vals := c.Request().Header.Values(headerIdempotencyKey)
	switch {
	case len(vals) == 0:
		return "", nil
	case len(vals) > 1:
		return "", newError(http.StatusBadRequest, codeInvalidKey, "Idempotency-Key given more than once: send one")
	}
	key, ok := unquoteKey(vals[0])
	if !ok || !inventory.ValidKey(key) {
		return "", newError(http.StatusBadRequest, codeInvalidKey,
			fmt.Sprintf(`Idempotency-Key must be 1 to %d printable ASCII characters (a UUID is a good choice), bare or as a Structured Field string: in double quotes, with \" and \\ escaped`, inventory.MaxKeyLen))
	}
	return key, nil
}

// etag is an item version as an entity tag.
func etag(version int64) string { return `"` + strconv.FormatInt(version, 10) + `"` }

// ifMatch returns the version a PUT's If-Match header asks for, nil when
// it has none, or a 400 when it is malformed or given twice.
func ifMatch(c echo.Context) (*int64, *apiError) {
	vals := c.Request().Header.Values("If-Match")
	switch {
	case len(vals) == 0:
		return nil, nil
	case len(vals) > 1:
		return nil, newError(http.StatusBadRequest, codeInvalidPrecondition, "If-Match given more than once: send one ETag")
	}
	v := vals[0]
	n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(v, `"`), `"`), 10, 64)
	if err != nil || !strings.HasPrefix(v, `"`) || !strings.HasSuffix(v, `"`) || len(v) < 3 {
		return nil, newError(http.StatusBadRequest, codeInvalidPrecondition,
			fmt.Sprintf(`If-Match %q: want the item's ETag, a version in quotes such as "7"`, v))
	}
	return &n, nil
}

// sku returns the path's sku, or a 400 that names the rule.
func sku(c echo.Context) (string, *apiError) {
	v := c.Param("sku")
	if !inventory.ValidSKU(v) {
		e := newError(http.StatusBadRequest, codeInvalidSKU,
			fmt.Sprintf("sku %q: want 1 to %d of A-Z a-z 0-9 . _ -", v, inventory.MaxSKULen))
		return "", e
	}
	return v, nil
}

// storeError maps a Store error (not a decrement's) to a response.
func storeError(err error, sku string) error {
	switch {
	case errors.Is(err, inventory.ErrNotFound):
		e := newError(http.StatusNotFound, codeNotFound, "no item has this sku")
		e.SKU = sku
		return e
	case errors.Is(err, inventory.ErrInvalid):
		return newError(http.StatusBadRequest, codeInvalidStock, err.Error())
	case errors.Is(err, inventory.ErrStale):
		e := newError(http.StatusPreconditionFailed, codeVersionMismatch, "the item's version is not the one in If-Match: read it again; nothing was changed")
		e.SKU = sku
		return e
	case errors.Is(err, inventory.ErrOutcomeUnknown):
		e := newError(http.StatusInternalServerError, codeOutcomeUnknown,
			"the stock write got no answer: it may or may not have been applied. Do not send a PUT again blindly (a sale since would be overwritten): read the item; a restock may be sent again with the same Idempotency-Key")
		e.SKU, e.cause = sku, err
		return e
	}
	e, _ := decrementError(err) // timeouts and internal errors alike
	return e
}

// putItem sets (or resets) an item's stock: PUT /v1/items/:sku {"stock": n}.
// With If-Match: "<version>" it sets it only at that version (412
// otherwise), so that a client that decided from what it read cannot
// overwrite a sale made since. With "split": true the stock is set split
// across the replica's --buckets documents (mongostore.Store.PutSplit),
// so that the buckets strategy's sales never pay the split.
func (s *Server) putItem(c echo.Context) error {
	sku, aerr := sku(c)
	if aerr != nil {
		return aerr
	}
	version, aerr := ifMatch(c)
	if aerr != nil {
		return aerr
	}
	fields, aerr := decodeObject(c, stockChangeFields...)
	if aerr != nil {
		return aerr
	}
	stock, aerr := integerField(fields, "stock", codeInvalidStock)
	if aerr != nil {
		return aerr
	}
	if stock < 0 {
		return newError(http.StatusBadRequest, codeInvalidStock, fmt.Sprintf(`"stock" must not be negative, got %d`, stock))
	}
	split, aerr := boolField(fields, "split")
	if aerr != nil {
		return aerr
	}
	if split && version != nil {
		return newError(http.StatusBadRequest, codeInvalidPrecondition, `"split" and If-Match cannot go together: send a PUT with "split" without If-Match`)
	}
	var it inventory.Item
	var err error
	switch {
	case split:
		it, err = s.adminStore.PutSplit(c.Request().Context(), sku, stock, s.cfg.Buckets)
	case version != nil:
		it, err = s.adminStore.PutIf(c.Request().Context(), sku, stock, *version)
	default:
		it, err = s.adminStore.Put(c.Request().Context(), sku, stock)
	}
	if err != nil {
		return storeError(err, sku)
	}
	return s.itemAnswer(c, it)
}

// restock changes an item's stock by a number of units, once per
// Idempotency-Key: POST /v1/items/:sku/restock {"qty": n}, n from
// -MaxRestockQty to MaxRestockQty and not 0. Unlike a PUT it is safe to
// send again after a lost answer: the key makes a retry change nothing,
// and it commutes with the sales made in between.
func (s *Server) restock(c echo.Context) error {
	sku, aerr := sku(c)
	if aerr != nil {
		return aerr
	}
	key, aerr := idempotencyKey(c)
	if aerr != nil {
		return aerr
	}
	if key == "" {
		return newError(http.StatusBadRequest, codeInvalidKey,
			"a restock needs an Idempotency-Key (one per intended change, a UUID is a good choice): with it, a retry after a lost answer cannot apply it twice")
	}
	fields, aerr := decodeObject(c, restockFields...)
	if aerr != nil {
		return aerr
	}
	qty, aerr := integerField(fields, "qty", codeInvalidQty)
	if aerr != nil {
		return aerr
	}
	if qty == 0 || qty < -inventory.MaxRestockQty || qty > inventory.MaxRestockQty {
		return newError(http.StatusBadRequest, codeInvalidQty,
			fmt.Sprintf(`"qty" must be from -%d to %d, and not 0, got %d`, inventory.MaxRestockQty, inventory.MaxRestockQty, qty))
	}
	it, replayed, err := s.adminStore.Restock(c.Request().Context(), sku, key, qty)
	var ie *inventory.InsufficientError
	switch {
	case errors.As(err, &ie):
		e := newError(http.StatusConflict, codeInsufficientStock, "the restock would take the stock below zero; nothing was changed")
		e.SKU, e.Stock, e.Qty = sku, &ie.Stock, &ie.Qty
		return e
	case errors.Is(err, inventory.ErrKeyReused):
		e := newError(http.StatusUnprocessableEntity, codeKeyReused, "this Idempotency-Key was used for a restock with another qty; nothing was changed")
		e.SKU = sku
		return e
	case errors.Is(err, inventory.ErrInvalid):
		return newError(http.StatusBadRequest, codeInvalidQty, err.Error())
	case errors.Is(err, inventory.ErrConflict):
		return unavailable(codeConflict, "the item kept changing between the restock's read and its write; nothing was changed", err)
	case err != nil:
		return storeError(err, sku)
	}
	if replayed {
		c.Response().Header().Set(headerReplayed, "true")
	}
	return s.itemAnswer(c, it)
}

// itemAnswer answers 200 with it and its ETag.
func (s *Server) itemAnswer(c echo.Context, it inventory.Item) error {
	if it.Fences == nil {
		it.Fences = map[string]int64{}
	}
	c.Response().Header().Set("ETag", etag(it.Version))
	return c.JSON(http.StatusOK, itemOf(it, s.cfg.Replica))
}

// getItem returns an item: GET /v1/items/:sku.
func (s *Server) getItem(c echo.Context) error {
	sku, aerr := sku(c)
	if aerr != nil {
		return aerr
	}
	it, err := s.adminStore.Snapshot(c.Request().Context(), sku)
	if err != nil {
		return storeError(err, sku)
	}
	return s.itemAnswer(c, it)
}

// strategyNotOffered answers a request for a strategy the service has but
// this replica does not offer: an unsafe one outside demo mode (403), or
// one whose lock service is not configured (503, yet without Retry-After:
// asking this replica again will not help until it is reconfigured).
func strategyNotOffered(info strategy.Info) error {
	var e *apiError
	if !info.Safe {
		e = newError(http.StatusForbidden, codeStrategyDisabled,
			fmt.Sprintf("strategy %q oversells across replicas and is offered only by replicas started with --demo / DEMO=true; nothing was changed", info.Name))
	} else {
		needs := lockServices[info.Lock].Needs
		if info.Name == strategy.Queued {
			needs = natsNeeds
		}
		e = newError(http.StatusServiceUnavailable, codeStrategyUnavailable,
			fmt.Sprintf("strategy %q is not configured on this replica (it needs %s); nothing was changed", info.Name, needs))
	}
	e.Strategy = info.Name
	return e
}

// decrement sells qty units: POST /v1/items/:sku/decrement
// {"qty": n, "strategy": "..."}, optionally with an Idempotency-Key header.
// Input is checked in the order of docs/api.md, and nothing is read or
// written before it all passes.
func (s *Server) decrement(c echo.Context) error {
	sku, aerr := sku(c)
	if aerr != nil {
		return aerr
	}
	key, aerr := idempotencyKey(c)
	if aerr != nil {
		return aerr
	}
	fields, aerr := decodeObject(c, decrementFields...)
	if aerr != nil {
		return aerr
	}
	name, aerr := s.strategyField(fields)
	if aerr != nil {
		return aerr
	}
	st, ok := s.strategies[name]
	if info, known := strategy.Lookup(name); !ok && known {
		return strategyNotOffered(info)
	}
	if !ok {
		e := newError(http.StatusBadRequest, codeUnknownStrategy, fmt.Sprintf("unknown strategy %q: want one of %v", name, strategy.Names()))
		e.Strategy = name
		return e
	}
	qty, aerr := integerField(fields, "qty", codeInvalidQty)
	if aerr != nil {
		return aerr
	}
	if qty <= 0 || qty > s.cfg.MaxQty {
		e := newError(http.StatusBadRequest, codeInvalidQty, fmt.Sprintf(`"qty" must be from 1 to %d, got %d`, s.cfg.MaxQty, qty))
		return e
	}

	req := inventory.Request{SKU: sku, Qty: qty, Key: key}
	if name == strategy.Queued && s.queued != nil && prefersAsync(c.Request().Header) {
		sent, _, _ := stringField(fields, "strategy")
		return s.decrementAsync(c, req, sent)
	}
	if name == strategy.RedisStock {
		s.metrics.redisStockSold(sku)
	}
	ctx := c.Request().Context()
	var (
		sale     inventory.Sale
		replayed bool
		err      error
	)
	if key != "" {
		// The strategy as sent, not as defaulted, identifies the request:
		// a retry that reaches a replica with another default is the
		// same request.
		sent, _, _ := stringField(fields, "strategy")
		sale, replayed, err = s.store.DecrementOnce(ctx, st, req, sent)
	} else {
		sale, err = st.Decrement(ctx, req)
	}
	if err != nil {
		e, result := decrementError(err)
		s.metrics.decrement(name, result, false)
		e.SKU, e.Strategy = sku, name
		return e
	}
	result := "ok"
	if replayed {
		result = "replayed"
		c.Response().Header().Set(headerReplayed, "true")
	}
	s.metrics.decrement(name, result, sale.LedgerErr != nil)
	return c.JSON(http.StatusOK, answerOf(sale))
}

// orders lists a page of an item's ledger:
// GET /v1/items/:sku/orders[?since=RFC3339][&limit=n][&after=cursor].
func (s *Server) orders(c echo.Context) error {
	sku, aerr := sku(c)
	if aerr != nil {
		return aerr
	}
	q := inventory.OrdersQuery{SKU: sku, After: c.QueryParam("after")}
	if v := c.QueryParam("since"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return newError(http.StatusBadRequest, codeInvalidSince, fmt.Sprintf("since %q: want an RFC 3339 time such as 2025-01-02T15:04:05Z", v))
		}
		q.Since = t
	}
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > inventory.MaxOrdersLimit {
			return newError(http.StatusBadRequest, codeInvalidLimit, fmt.Sprintf("limit %q: want a whole number from 1 to %d (default %d)", v, inventory.MaxOrdersLimit, inventory.DefaultOrdersLimit))
		}
		q.Limit = n
	}
	ctx := c.Request().Context()
	if _, err := s.adminStore.Get(ctx, sku); err != nil {
		return storeError(err, sku)
	}
	page, err := s.adminStore.Orders(ctx, q)
	if errors.Is(err, inventory.ErrInvalid) {
		return newError(http.StatusBadRequest, codeInvalidCursor, fmt.Sprintf("after %q: pass the \"next\" of the previous page unchanged", q.After))
	}
	if err != nil {
		return storeError(err, sku)
	}
	orders := make([]stockapi.Order, len(page.Orders))
	for i, o := range page.Orders {
		orders[i] = orderOf(o)
	}
	return c.JSON(http.StatusOK, stockapi.OrdersPage{SKU: sku, Replica: s.cfg.Replica, Count: len(orders), Orders: orders, Next: page.Next})
}
