package server

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
)

// route is one endpoint of the replica.
type route struct {
	method, path string
	h            echo.HandlerFunc
	params       []string // the query parameters the route takes; any other is a 400
	internal     bool     // health and metrics: on the internal listener when there is one
}

// routes builds the API router and the router of health and metrics, which
// is the same one unless InternalAddr is set.
func (s *Server) routes() (api, internal *echo.Echo) {
	table := []route{
		{http.MethodPut, "/v1/items/:sku", s.trackWrite(s.admin(s.putItem)), nil, false},
		{http.MethodGet, "/v1/items/:sku", s.getItem, nil, false},
		{http.MethodPost, "/v1/items/:sku/decrement", s.trackWrite(s.admitSale(s.decrement)), nil, false},
		{http.MethodPost, "/v1/items/:sku/restock", s.trackWrite(s.admin(s.restock)), nil, false},
		{http.MethodGet, "/v1/items/:sku/orders", s.orders, []string{"since", "limit", "after"}, false},
		{http.MethodGet, "/v1/items/:sku/orders/:order_id", s.getOrder, nil, false},
		{http.MethodPost, "/v1/items/:sku/holds", s.trackWrite(s.admitSale(s.createHold)), nil, false},
		{http.MethodGet, "/v1/items/:sku/holds/:id", s.admitSale(s.getHold), nil, false},
		{http.MethodPost, "/v1/items/:sku/holds/:id/confirm", s.trackWrite(s.admitSale(s.confirmHold)), nil, false},
		{http.MethodPost, "/v1/items/:sku/holds/:id/release", s.trackWrite(s.admitSale(s.releaseHold)), nil, false},
		{http.MethodGet, "/openapi.json", s.openapi, nil, false},
		{http.MethodGet, "/healthz", s.healthz, nil, true},
		{http.MethodGet, "/readyz", s.readyz, nil, true},
		{http.MethodGet, "/metrics", echo.WrapHandler(s.metrics.handler()), nil, true},
	}
	if s.cfg.InternalAddr == "" {
		api = s.router(table)
		return api, api
	}
	var public, private []route
	for _, r := range table {
		if r.internal {
			private = append(private, r)
		} else {
			public = append(public, r)
		}
	}
	return s.router(public), s.router(private)
}

// router builds an Echo router over table.
func (s *Server) router(table []route) *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.errorHandler
	known := make(map[string]bool, len(table))
	for _, r := range table {
		known[r.path] = true
	}

	// Order matters: the replica header is set before anything can answer,
	// so that errors carry it too; metrics see the final status; panics
	// become 500s that metrics count.
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			c.Set(receivedKey, time.Now())
			c.Response().Header().Set("X-Replica", s.cfg.Replica)
			return next(c)
		}
	})
	e.Use(s.metrics.middleware(known))
	e.Use(middleware.Recover())
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			ctx, cancel := context.WithTimeout(c.Request().Context(), s.cfg.RequestTimeout)
			defer cancel()
			c.SetRequest(c.Request().WithContext(ctx))
			return next(c)
		}
	})
	for _, r := range table {
		e.Add(r.method, r.path, onlyParams(r.h, r.params...))
	}
	return e
}

// admin admits a stock change only with the admin token: without a
// configured token the route does not exist (404), and a request without
// the right bearer token is a 401. Nothing is read or written first.
func (s *Server) admin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.cfg.AdminToken == "" {
			return newError(http.StatusNotFound, codeNotFound, "no such route: stock changes need --admin-token / ADMIN_TOKEN on this replica")
		}
		got, ok := strings.CutPrefix(c.Request().Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.AdminToken)) != 1 {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="stock admin"`)
			return newError(http.StatusUnauthorized, codeUnauthorized, "stock changes need Authorization: Bearer <the replica's admin token>")
		}
		return next(c)
	}
}

// trackWrite admits a request that may write, unless the replica is
// shutting down, and counts it until it has answered.
func (s *Server) trackWrite(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		s.drainMu.Lock()
		if s.draining {
			s.drainMu.Unlock()
			return unavailable(codeShuttingDown, "this replica is shutting down; nothing was changed: ask another replica", nil)
		}
		s.writes.Add(1)
		s.drainMu.Unlock()
		defer s.writes.Done()
		return next(c)
	}
}

// onlyParams refuses a request with a query parameter its route does not
// take: a parameter the service ignores, such as ?strategy=, would
// otherwise let a client believe it chose something it did not.
func onlyParams(h echo.HandlerFunc, allowed ...string) echo.HandlerFunc {
	return func(c echo.Context) error {
		// Parsed strictly: url.Values drops the pairs it cannot parse
		// (?strategy=local; or ?strategy=%zz), which would then be ignored.
		params, err := url.ParseQuery(c.Request().URL.RawQuery)
		if err != nil {
			return newError(http.StatusBadRequest, codeUnknownParameter,
				fmt.Sprintf("malformed query %q: this route takes %s", c.Request().URL.RawQuery, takes(allowed)))
		}
		var unknown []string
		for name := range params {
			if !slices.Contains(allowed, name) {
				unknown = append(unknown, strconv.Quote(name))
			}
		}
		if len(unknown) > 0 {
			slices.Sort(unknown)
			return newError(http.StatusBadRequest, codeUnknownParameter,
				fmt.Sprintf("unknown query parameter %s: this route takes %s (a decrement's strategy goes in the JSON body)", strings.Join(unknown, ", "), takes(allowed)))
		}
		return h(c)
	}
}

// takes says which query parameters a route takes.
func takes(allowed []string) string {
	if len(allowed) == 0 {
		return "no query parameters"
	}
	return "only " + strings.Join(allowed, ", ")
}
