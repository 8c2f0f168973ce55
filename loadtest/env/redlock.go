package env

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/stocklock/stocklock/internal/devstore"
)

// RedlockServers is how many independent redis-servers Options.Redlock
// starts: five, the size the Redlock algorithm is usually run with (it
// tolerates two down).
const RedlockServers = 5

// redlockStores are the servers of the redlock strategy, none without
// Options.Redlock: real redis-servers, or in-process stand-ins when
// redis-server is not on PATH.
type redlockStores struct {
	servers *devstore.RedisServers
	mini    []*miniredis.Miniredis
	addrs   []string
}

// startRedlock starts the five servers of Options.Redlock, if asked: redis-servers
// from PATH, with the clock shim when gcc can build it, else miniredis
// (the strategy then runs everywhere, and only the drills that stop
// servers or move their clocks are unsupported).
func (e *Env) startRedlock(ctx context.Context, logger *slog.Logger) error {
	if !e.opt.Redlock {
		return nil
	}
	e.logf("starting %d independent redis-servers for redlock...", RedlockServers)
	t0 := time.Now()
	s, err := devstore.StartRedisServers(ctx, logger, RedlockServers)
	var text string
	switch {
	case errors.Is(err, devstore.ErrNoRedisServer):
		for range RedlockServers {
			m := miniredis.NewMiniRedis()
			m.ClockTTL(true) // expire keys in real time
			if err := m.Start(); err != nil {
				return fmt.Errorf("start miniredis for redlock: %w", err)
			}
			e.redlock.mini, e.redlock.addrs = append(e.redlock.mini, m), append(e.redlock.addrs, m.Addr())
		}
		text = fmt.Sprintf("%d miniredis (in-process stand-ins: no redis-server on PATH) at %s", RedlockServers, strings.Join(e.redlock.addrs, ","))
	case err != nil:
		return fmt.Errorf("start the redlock redis-servers: %w", err)
	default:
		e.redlock = redlockStores{servers: s, addrs: s.Addrs()}
		clock := "clocks movable (clock shim)"
		if s.NoClock != nil {
			clock = "clocks fixed: " + s.NoClock.Error()
		}
		text = fmt.Sprintf("%d private redis-servers at %s, %s", RedlockServers, strings.Join(s.Addrs(), ","), clock)
	}
	e.RedisText += "; Redlock: " + text
	e.logf("  Redlock: %s [%s]", text, time.Since(t0).Round(time.Millisecond))
	return nil
}

// Redlock returns the redlock servers, in order, to stop, start or move
// the clocks of; it wraps ErrUnsupported when they are not redis-servers
// the env started.
func (e *Env) Redlock() ([]*devstore.Redis, error) {
	if e.redlock.servers == nil {
		return nil, fmt.Errorf("%w: needs the %d redis-servers the harness starts for redlock (redis-server on PATH)", ErrUnsupported, RedlockServers)
	}
	return e.redlock.servers.Servers, nil
}

func (r *redlockStores) close() error {
	for _, m := range r.mini {
		m.Close()
	}
	if r.servers != nil {
		return r.servers.Close()
	}
	return nil
}
