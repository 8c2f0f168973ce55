package devstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stocklock/stocklock/internal/freeport"
)

// Redis is a running Redis server, or a stand-in for one.
type Redis struct {
	Addr string // host:port
	Kind string // KindExternal, KindRedisServer or KindMiniredis

	logger *slog.Logger
	mini   *miniredis.Miniredis

	// redis-server only. mu guards proc across Stop, Start and Close.
	bin, dir string
	env      []string // added to the process's environment: the clock shim's
	mu       sync.Mutex
	proc     *redisProcess
	// aof is the appendfsync policy of the append-only file that SetAOF
	// turned on ("" when off): Start loads the file and keeps writing it.
	aof string

	// clockFile holds the server's clock offset, read by the clock shim;
	// empty when the shim is not loaded (see StartRedisClock).
	clockFile string
}

// redisProcess is one run of redis-server.
type redisProcess struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has been reaped
}

// StartRedis returns the Redis at REDIS_ADDR if that is set (and answers
// PING); otherwise it starts redis-server from PATH on a free loopback port,
// with no persistence and its own temporary directory; otherwise it starts
// miniredis in process, with TTLs expiring in real time. The caller must
// Close it. ctx bounds only the start-up. A nil logger means slog.Default().
func StartRedis(ctx context.Context, logger *slog.Logger) (*Redis, error) {
	if logger == nil {
		logger = slog.Default()
	}

	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		if err := waitRedis(ctx, addr, nil); err != nil {
			return nil, fmt.Errorf("devstore: REDIS_ADDR=%s: %w", addr, err)
		}
		logger.Info("using external Redis", slog.String("addr", addr))
		return &Redis{Addr: addr, Kind: KindExternal, logger: logger}, nil
	}

	if bin, err := exec.LookPath("redis-server"); err == nil {
		r, err := startRedisServer(ctx, bin, logger, "", 0)
		if err == nil {
			return r, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		logger.Warn("redis-server failed to start, falling back to miniredis", slog.Any("error", err))
	}

	m := miniredis.NewMiniRedis()
	// Without ClockTTL, miniredis keys only expire on FastForward, and lock
	// leases would never run out.
	m.ClockTTL(true)
	if err := m.Start(); err != nil {
		return nil, fmt.Errorf("devstore: start miniredis: %w", err)
	}
	logger.Warn("redis-server not available: using miniredis, an in-process stand-in for Redis; "+
		"set REDIS_ADDR or install redis-server to test against the real thing",
		slog.String("addr", m.Addr()))

	return &Redis{Addr: m.Addr(), Kind: KindMiniredis, logger: logger, mini: m}, nil
}

// startRedisServer starts redis-server on a free port, trying a few ports
// because another process may take the one picked before redis binds it.
// With a shim (the path of the built clock shim), the server's clock is
// shifted by the offset in a file in its directory (see SetClockOffset);
// the offset starts at initial.
func startRedisServer(ctx context.Context, bin string, logger *slog.Logger, shim string, initial time.Duration) (*Redis, error) {
	dir, err := os.MkdirTemp("", "devstore-redis-")
	if err != nil {
		return nil, fmt.Errorf("devstore: redis-server dir: %w", err)
	}

	r := &Redis{Kind: KindRedisServer, logger: logger, bin: bin, dir: dir}
	if shim != "" {
		r.clockFile = filepath.Join(dir, "clock-offset-ms")
		if err := writeOffset(r.clockFile, initial); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		r.env = shimEnv(shim, r.clockFile)
	}

	for attempt := 1; ; attempt++ {
		if r.Addr, err = freeAddr(); err != nil {
			break
		}
		if err = r.Start(ctx); err == nil {
			logger.Info("started redis-server", slog.String("addr", r.Addr), slog.Int("pid", r.proc.cmd.Process.Pid))
			return r, nil
		}
		if attempt == 3 || ctx.Err() != nil {
			break
		}
	}

	_ = os.RemoveAll(dir)
	return nil, err
}

// Start starts the redis-server again on its port after Stop, and waits until
// it answers PING. It is a no-op if the server is running, and returns
// ErrCannotRestart for other kinds.
func (r *Redis) Start(ctx context.Context) error {
	if r.Kind != KindRedisServer {
		return fmt.Errorf("start %s Redis: %w", r.Kind, ErrCannotRestart)
	}

	r.mu.Lock()
	defer r.mu.Unlock()

	if r.proc != nil {
		return nil
	}

	var extra []string
	if r.aof != "" {
		extra = []string{"--appendonly", "yes", "--appendfsync", r.aof}
	}
	p, err := startRedisProcess(ctx, r.bin, r.Addr, r.dir, r.env, extra...)
	if err != nil {
		return err
	}
	r.proc = p
	return nil
}

// startRedisProcess starts bin as a redis-server on loopback addr, with
// its log in dir and nothing on disk (a restart starts empty, like a
// failover to a replica that had not caught up, and no test sees another's
// data), and extra arguments after those; env is added to its environment.
// It waits until the server answers PING.
func startRedisProcess(ctx context.Context, bin, addr, dir string, env []string, extra ...string) (*redisProcess, error) {
	_, port, _ := net.SplitHostPort(addr)
	logFile := filepath.Join(dir, "redis.log")
	args := append([]string{
		"--bind", "127.0.0.1", "--port", port,
		"--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", logFile,
	}, extra...)
	cmd := exec.Command(bin, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("devstore: start redis-server: %w", err)
	}
	p := &redisProcess{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	if err := waitRedis(ctx, addr, p.exited); err != nil {
		p.stop()
		return nil, fmt.Errorf("devstore: redis-server on %s: %w (log: %s)", addr, err, lastLine(logFile))
	}
	return p, nil
}

// Stop stops the redis-server by its pid and waits for it to exit. All data
// is lost, unless SetAOF turned the append-only file on. It is a no-op if the server is stopped, and returns
// ErrCannotRestart for other kinds.
func (r *Redis) Stop() error {
	if r.Kind != KindRedisServer {
		return fmt.Errorf("stop %s Redis: %w", r.Kind, ErrCannotRestart)
	}

	r.mu.Lock()
	defer r.mu.Unlock()

	if r.proc != nil {
		r.proc.stop()
		r.proc = nil
	}
	return nil
}

// Crash kills the redis-server with SIGKILL and waits for it to exit, as a
// crash would: nothing is flushed or saved on the way out. Start brings it
// back, with no data, or with what its append-only file holds after
// SetAOF. It is a no-op if the server is stopped, and returns
// ErrCannotRestart for other kinds.
func (r *Redis) Crash() error {
	if r.Kind != KindRedisServer {
		return fmt.Errorf("crash %s Redis: %w", r.Kind, ErrCannotRestart)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc != nil {
		r.proc.kill()
		r.proc = nil
	}
	return nil
}

// ErrAOFPolicy is SetAOF's error for an appendfsync policy Redis does not
// have.
var ErrAOFPolicy = errors.New("devstore: appendfsync policy must be always, everysec or no")

// SetAOF turns the running redis-server's append-only file on, with the
// appendfsync policy fsync ("always", "everysec", "no"), or off (""),
// with CONFIG SET, and makes Start load it and write on: a restart then
// keeps every write the file holds. Turning it on waits until the file
// holds the whole data set (its first rewrite). It returns
// ErrCannotRestart for other kinds.
func (r *Redis) SetAOF(ctx context.Context, fsync string) error {
	if r.Kind != KindRedisServer {
		return fmt.Errorf("append-only file of %s Redis: %w", r.Kind, ErrCannotRestart)
	}
	switch fsync {
	case "", "always", "everysec", "no":
	default:
		return fmt.Errorf("%w: %q", ErrAOFPolicy, fsync)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	if fsync == "" {
		if err := c.ConfigSet(ctx, "appendonly", "no").Err(); err != nil {
			return fmt.Errorf("devstore: turn the append-only file off: %w", err)
		}
		r.aof = ""
		return nil
	}
	if err := c.ConfigSet(ctx, "appendfsync", fsync).Err(); err != nil {
		return fmt.Errorf("devstore: appendfsync %s: %w", fsync, err)
	}
	if err := c.ConfigSet(ctx, "appendonly", "yes").Err(); err != nil {
		return fmt.Errorf("devstore: turn the append-only file on: %w", err)
	}
	r.aof = fsync
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		info, err := c.Info(wctx, "persistence").Result()
		if err == nil && strings.Contains(info, "aof_enabled:1") && strings.Contains(info, "aof_rewrite_in_progress:0") &&
			strings.Contains(info, "aof_rewrite_scheduled:0") && strings.Contains(info, "aof_last_bgrewrite_status:ok") {
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("devstore: the append-only file's first rewrite did not finish: %w (last: %v)", wctx.Err(), err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Restart stops the redis-server and starts it again on the same port, with
// no data (unless SetAOF turned the append-only file on). Clients see their connections dropped, as in a server crash. It
// returns ErrCannotRestart for other kinds.
func (r *Redis) Restart(ctx context.Context) error {
	if err := r.Stop(); err != nil {
		return err
	}
	return r.Start(ctx)
}

// Close stops a server started by StartRedis and removes its files. It leaves
// an external server alone.
func (r *Redis) Close() error {
	switch r.Kind {
	case KindMiniredis:
		r.mini.Close()
	case KindRedisServer:
		_ = r.Stop()
		if err := os.RemoveAll(r.dir); err != nil {
			return fmt.Errorf("devstore: remove redis-server dir: %w", err)
		}
	}
	return nil
}

// stop asks redis-server to shut down and kills it if it has not exited
// within a few seconds, so that Close cannot hang on a wedged server.
func (p *redisProcess) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)

	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		p.kill()
	}
}

// kill ends the process with SIGKILL, as a crash would, and waits for it.
func (p *redisProcess) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// waitRedis polls addr with PING until it answers PONG, ctx is done, exited
// is closed (the server died), or 10 seconds pass.
func waitRedis(ctx context.Context, addr string, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()

	for {
		err := pingRedis(ctx, addr)
		if err == nil {
			return nil
		}

		select {
		case <-ctx.Done():
			return fmt.Errorf("no answer to PING: %w (last error: %w)", ctx.Err(), err)
		case <-exited:
			return errors.New("redis-server exited")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// pingRedis sends one PING in RESP and expects +PONG. It needs no client
// library, and answers "not ready" for a server still loading (-LOADING).
func pingRedis(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()

	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line = strings.TrimSpace(line); line != "+PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// freeAddr returns a loopback address with a port that was free a moment
// ago, outside the range port-0 listeners and clients are handed.
func freeAddr() (string, error) {
	addr, err := freeport.Addr()
	if err != nil {
		return "", fmt.Errorf("devstore: %w", err)
	}
	return addr, nil
}

// lastLine returns the last non-empty line of a log file, for error messages.
func lastLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unavailable"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}
