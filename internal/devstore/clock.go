package devstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// clockShimSrc is an LD_PRELOAD library that shifts CLOCK_REALTIME
// (clock_gettime, gettimeofday, time) by an offset in milliseconds read from
// the file named by $CLOCKSHIM_OFFSET_FILE. Debian's libfaketime cannot do
// this for redis-server: it resolves the real functions with dlsym, which
// allocates, and jemalloc is not ready yet. The shim reads the real clocks
// with the raw system call instead, and reads the file again at most once a
// millisecond (see the source).
//
//go:embed clockshim/clockshim.c
var clockShimSrc []byte

// clockShimEnv names the environment variable the shim reads the offset
// file's path from.
const clockShimEnv = "CLOCKSHIM_OFFSET_FILE"

// ErrNoClockShim is returned when the clock shim cannot be built (no gcc on
// PATH, or it fails to compile), and by SetClockOffset for a server that was
// started without it.
var ErrNoClockShim = errors.New("devstore: no clock shim")

var shimBuild struct {
	sync.Mutex
	path string
}

// ClockShim returns the path of the clock shim, built with gcc the first
// time into the user's cache directory under a name that carries the hash of
// its source, so that every test process after the first reuses it. The
// error wraps ErrNoClockShim when gcc is missing or fails.
func ClockShim(ctx context.Context, logger *slog.Logger) (string, error) {
	if logger == nil {
		logger = slog.Default()
	}
	shimBuild.Lock()
	defer shimBuild.Unlock()
	if shimBuild.path != "" {
		return shimBuild.path, nil
	}

	sum := sha256.Sum256(clockShimSrc)
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "stocklock-devstore")
	path := filepath.Join(dir, "clockshim-"+hex.EncodeToString(sum[:8])+".so")
	if _, err := os.Stat(path); err == nil {
		shimBuild.path = path
		return path, nil
	}

	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return "", fmt.Errorf("%w: gcc is not on PATH (apt-get install gcc), so the clock shim cannot be built", ErrNoClockShim)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("devstore: clock shim cache: %w", err)
	}
	// Build under a temporary name and rename: another test process may be
	// building the same shim, and must never load half a file.
	tmp, err := os.CreateTemp(dir, "clockshim-*.so.tmp")
	if err != nil {
		return "", fmt.Errorf("devstore: clock shim cache: %w", err)
	}
	_ = tmp.Close()
	defer os.Remove(tmp.Name())
	cmd := exec.CommandContext(ctx, gcc, "-shared", "-fPIC", "-O2", "-x", "c", "-o", tmp.Name(), "-")
	cmd.Stdin = bytes.NewReader(clockShimSrc)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%w: gcc failed: %v: %s", ErrNoClockShim, err, lastLines(string(out), 3))
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("devstore: clock shim cache: %w", err)
	}
	logger.Info("built clock shim", slog.String("path", path))
	shimBuild.path = path
	return path, nil
}

// shimEnv is the environment that loads the shim with its offset in file.
func shimEnv(shim, file string) []string {
	return []string{"LD_PRELOAD=" + shim, clockShimEnv + "=" + file}
}

// writeOffset replaces the offset file in one rename, so that the shim reads
// the old offset or the new one, never a partial write.
func writeOffset(file string, d time.Duration) error {
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(d.Milliseconds(), 10)+"\n"), 0o644); err != nil {
		return fmt.Errorf("devstore: write clock offset: %w", err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return fmt.Errorf("devstore: write clock offset: %w", err)
	}
	return nil
}

// StartRedisClock starts a private redis-server from PATH, like StartRedis
// but never an external one or miniredis, with the clock shim loaded: its
// wall clock (what TIME answers and what key expiry is measured against)
// can be moved with SetClockOffset. It returns ErrNoRedisServer without
// redis-server, and an error wrapping ErrNoClockShim without gcc.
func StartRedisClock(ctx context.Context, logger *slog.Logger) (*Redis, error) {
	if logger == nil {
		logger = slog.Default()
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNoRedisServer
	}
	shim, err := ClockShim(ctx, logger)
	if err != nil {
		return nil, err
	}
	return startRedisServer(ctx, bin, logger, shim, 0)
}

// HasClock reports whether the server runs with the clock shim, so that
// SetClockOffset can move its clock.
func (r *Redis) HasClock() bool { return r.clockFile != "" }

// SetClockOffset sets the server's wall clock to the real time plus d
// (whole milliseconds; negative moves it back), as an NTP step or an
// operator's date command would, and waits until TIME shows it. Expiries are
// measured against that clock: a step forward past a key's expiry removes
// the key at once, a step back keeps it longer. The offset stays across
// Stop and Start. It returns an error wrapping ErrNoClockShim for a server
// started without the shim.
func (r *Redis) SetClockOffset(d time.Duration) error {
	if r.clockFile == "" {
		return fmt.Errorf("%w: %s Redis at %s was not started with it", ErrNoClockShim, r.Kind, r.Addr)
	}
	r.mu.Lock()
	running := r.proc != nil
	r.mu.Unlock()
	if err := writeOffset(r.clockFile, d); err != nil {
		return err
	}
	r.logger.Info("moved redis-server clock", slog.String("addr", r.Addr), slog.Duration("offset", d))
	if !running {
		return nil
	}
	return r.waitClock(d)
}

// clockTolerance is how far TIME may be from the local clock plus the
// offset once an offset is in effect: a round trip on a busy machine, far
// below the steps a drill makes.
const clockTolerance = 250 * time.Millisecond

// waitClock polls TIME until the server's clock is within clockTolerance
// of the local clock plus d.
func (r *Redis) waitClock(d time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var skew time.Duration
	for {
		t, err := c.Time(ctx).Result()
		if err == nil {
			skew = t.Sub(time.Now()) - d
			if skew.Abs() < clockTolerance {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devstore: redis-server at %s: clock offset %v not in effect (TIME off by %v, last error %v): %w", r.Addr, d, skew, err, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}
