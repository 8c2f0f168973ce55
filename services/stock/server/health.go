package server

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
)

// readyTimeout bounds each dependency's ping in /readyz.
const readyTimeout = 2 * time.Second

type healthResponse struct {
	Status  string `json:"status"`
	Replica string `json:"replica"`
	// LocksHeld is the number of item leases this replica holds now, per
	// lock strategy: fault drills read it to find the holder to stall.
	LocksHeld map[string]int    `json:"locks_held"`
	Checks    map[string]string `json:"checks,omitempty"`
}

// healthz says the process is up and serving: GET /healthz. It checks no
// dependency, so that a database outage does not get replicas restarted.
func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, healthResponse{Status: "ok", Replica: s.cfg.Replica, LocksHeld: s.locksHeld()})
}

// readyz says whether MongoDB, Redis and, when configured, etcd answer:
// GET /readyz. A replica without etcd endpoints is ready without etcd (its
// etcd-lock requests answer strategy_unavailable), so no "etcd" check.
func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), readyTimeout)
	defer cancel()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		checks = map[string]string{}
	)
	check := func(name string, ping func(context.Context) error) {
		wg.Go(func() {
			res := "ok"
			if err := ping(ctx); err != nil {
				res = err.Error()
			}
			mu.Lock()
			checks[name] = res
			mu.Unlock()
		})
	}
	check("mongodb", func(ctx context.Context) error { return s.mongo.Ping(ctx, nil) })
	check("redis", func(ctx context.Context) error { return s.redis.Ping(ctx).Err() })
	if s.etcd != nil {
		check("etcd", func(ctx context.Context) error { return pingEtcd(ctx, s.etcd) })
	}
	wg.Wait()
	for _, res := range checks {
		if res != "ok" {
			e := newError(http.StatusServiceUnavailable, codeNotReady, "a dependency does not answer")
			e.Checks = checks
			return e
		}
	}
	return c.JSON(http.StatusOK, healthResponse{Status: "ready", Replica: s.cfg.Replica, LocksHeld: s.locksHeld(), Checks: checks})
}

func (s *Server) locksHeld() map[string]int {
	held := make(map[string]int, len(s.locked))
	for _, l := range s.locked {
		held[l.Name()] = l.Held()
	}
	return held
}
