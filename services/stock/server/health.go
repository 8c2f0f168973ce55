package server

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stocklock/stocklock/pkg/stockapi"
)

// readyTimeout bounds each dependency's ping in /readyz.
const readyTimeout = 2 * time.Second

// healthz says the process is up and serving: GET /healthz. It checks no
// dependency, so that a database outage does not get replicas restarted.
func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, stockapi.Health{Status: "ok", Replica: s.cfg.Replica, LocksHeld: s.locksHeld()})
}

// readyTTL is how long a readiness result is reused: probes from every
// load balancer and orchestrator must not each ping three stores.
const readyTTL = time.Second

// readyCache holds the last readiness result.
type readyCache struct {
	mu     sync.Mutex
	at     time.Time
	checks map[string]string // dependency -> "ok" or "failing"
}

// readyz says whether MongoDB, Redis and, when configured, etcd answer:
// GET /readyz. A replica without etcd endpoints is ready without etcd (its
// etcd-lock requests answer strategy_unavailable), so no "etcd" check. The
// result is reused for readyTTL, and says only "ok" or "failing" per check:
// the errors, which name internal hosts and ports, go to the log.
func (s *Server) readyz(c echo.Context) error {
	checks := s.readiness(c.Request().Context())
	for _, res := range checks {
		if res != "ok" {
			e := newError(http.StatusServiceUnavailable, codeNotReady, "a dependency does not answer; the replica's log says why")
			e.Checks = checks
			return e
		}
	}
	return c.JSON(http.StatusOK, stockapi.Health{Status: "ready", Replica: s.cfg.Replica, LocksHeld: s.locksHeld(), Checks: checks})
}

// readiness returns the checks, from the cache when it is fresh. Callers
// that arrive while it is being refreshed wait for that refresh.
func (s *Server) readiness(ctx context.Context) map[string]string {
	s.ready.mu.Lock()
	defer s.ready.mu.Unlock()
	if s.ready.checks != nil && time.Since(s.ready.at) < readyTTL {
		return s.ready.checks
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readyTimeout)
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
				res = "failing"
				s.logger.Warn("readiness check failed", slog.String("check", name), slog.Any("error", err))
			}
			mu.Lock()
			checks[name] = res
			mu.Unlock()
		})
	}
	check("mongodb", func(ctx context.Context) error { return s.control.Ping(ctx, nil) })
	check("redis", func(ctx context.Context) error { return s.redis.Ping(ctx).Err() })
	if s.etcd != nil {
		check("etcd", func(ctx context.Context) error { return pingEtcd(ctx, s.etcd) })
	}
	wg.Wait()
	s.ready.checks, s.ready.at = checks, time.Now()
	return checks
}

func (s *Server) locksHeld() map[string]int {
	held := make(map[string]int, len(s.locked))
	for _, l := range s.locked {
		held[l.Name()] = l.Held()
	}
	return held
}
