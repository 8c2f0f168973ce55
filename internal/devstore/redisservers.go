package devstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
)

// RedisServers are independent redis-servers (no replication, no cluster),
// as a Redlock runs on: each a private redis-server from PATH on its own
// free loopback port, without persistence. Each is a *Redis that can be
// stopped and started again (Stop, Start: it comes back empty, as a server
// restarted without persistence does) and, when the clock shim could be
// built, have its clock moved (SetClockOffset).
type RedisServers struct {
	Servers []*Redis

	// NoClock is why the servers run without the clock shim (it wraps
	// ErrNoClockShim), nil when every server has it.
	NoClock error
}

// StartRedisServers starts n redis-servers with the clock shim loaded, or
// without it (and the reason in NoClock) when the shim cannot be built. It
// returns ErrNoRedisServer when redis-server is not on PATH; REDIS_ADDR is
// not used, since one server cannot stand in for n independent ones. The
// caller must Close them. ctx bounds only the start-up. A nil logger means
// slog.Default().
func StartRedisServers(ctx context.Context, logger *slog.Logger, n int) (*RedisServers, error) {
	if logger == nil {
		logger = slog.Default()
	}
	if n < 1 {
		return nil, fmt.Errorf("devstore: %d redis-servers asked for", n)
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNoRedisServer
	}
	s := &RedisServers{}
	shim, err := ClockShim(ctx, logger)
	if err != nil {
		if !errors.Is(err, ErrNoClockShim) {
			return nil, err
		}
		s.NoClock = err
		logger.Warn("redis-servers run without the clock shim: their clocks cannot be moved", slog.Any("reason", err))
	}
	for range n {
		r, err := startRedisServer(ctx, bin, logger, shim, 0)
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		s.Servers = append(s.Servers, r)
	}
	return s, nil
}

// Addrs returns the servers' addresses, in order.
func (s *RedisServers) Addrs() []string {
	addrs := make([]string, len(s.Servers))
	for i, r := range s.Servers {
		addrs[i] = r.Addr
	}
	return addrs
}

// Close stops every server and removes its files.
func (s *RedisServers) Close() error {
	var errs []error
	for _, r := range s.Servers {
		errs = append(errs, r.Close())
	}
	return errors.Join(errs...)
}
