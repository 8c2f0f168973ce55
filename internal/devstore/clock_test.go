package devstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
)

// serverSkew returns how far the server's TIME is ahead of this process's
// clock.
func serverSkew(t *testing.T, c *redis.Client) time.Duration {
	t.Helper()
	before := time.Now()
	st, err := c.Time(t.Context()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	after := time.Now()
	return st.Sub(before.Add(after.Sub(before) / 2))
}

// TestClockShim moves a real redis-server's clock forward and back, and
// checks what TIME and key expiry make of it.
func TestClockShim(t *testing.T) {
	r := devstoretest.RedisClock(t)
	ctx := t.Context()
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	t.Cleanup(func() { _ = c.Close() })

	if s := serverSkew(t, c); s.Abs() > devstore.ClockTolerance {
		t.Fatalf("without an offset the server's clock is %v off", s)
	}

	// Forward past the TTL: the key is gone at once.
	if err := c.Set(ctx, "fwd", "v", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "kept", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.SetClockOffset(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	if s := serverSkew(t, c); (s - 20*time.Second).Abs() > devstore.ClockTolerance {
		t.Errorf("after +20s the server's clock is %v ahead, want about 20s", s)
	}
	if n, err := c.Exists(ctx, "fwd").Result(); err != nil || n != 0 {
		t.Errorf("a key set with PX 10000 exists = %d, %v after the clock moved 20s forward; want gone", n, err)
	}
	if n, err := c.Exists(ctx, "kept").Result(); err != nil || n != 1 {
		t.Errorf("a key without expiry exists = %d, %v after the step; want kept", n, err)
	}

	// Back, from the real time: a new key keeps its full TTL, and
	// a key set before the step lives longer by the step.
	if err := c.Set(ctx, "old", "v", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.SetClockOffset(-30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if s := serverSkew(t, c); (s + 30*time.Second).Abs() > devstore.ClockTolerance {
		t.Errorf("after -30s the server's clock is %v ahead, want about -30s", s)
	}
	if err := c.Set(ctx, "new", "v", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if ttl, err := c.PTTL(ctx, "new").Result(); err != nil || ttl < 9*time.Second || ttl > 10*time.Second {
		t.Errorf("PTTL of a key set with PX 10000 after the step back = %v, %v; want its full TTL", ttl, err)
	}
	if ttl, err := c.PTTL(ctx, "old").Result(); err != nil || ttl < 59*time.Second || ttl > 60*time.Second {
		t.Errorf("PTTL of a key set with PX 10000 before a step of -50s = %v, %v; want about 60s", ttl, err)
	}
	t.Logf("offset -30s: TIME %v ahead; PTTL new key %v, old key %v",
		serverSkew(t, c), c.PTTL(ctx, "new").Val(), c.PTTL(ctx, "old").Val())

	// The offset survives a restart.
	if err := r.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if s := serverSkew(t, c); (s + 30*time.Second).Abs() > devstore.ClockTolerance {
		t.Errorf("after a restart the server's clock is %v ahead, want about -30s", s)
	}
	if err := r.SetClockOffset(0); err != nil {
		t.Fatal(err)
	}
}

// TestClockShimNeedsGCC checks the reason given when the shim cannot be
// built, and that a server without it refuses SetClockOffset.
func TestClockShimNeedsGCC(t *testing.T) {
	t.Cleanup(devstore.ForgetClockShim())
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	t.Setenv("PATH", t.TempDir())
	_, err := devstore.ClockShim(t.Context(), devstoretest.Logger(t))
	if !errors.Is(err, devstore.ErrNoClockShim) {
		t.Fatalf("ClockShim without gcc = %v, want ErrNoClockShim", err)
	}
	t.Logf("reason: %v", err)

	r := &devstore.Redis{Kind: devstore.KindMiniredis, Addr: "127.0.0.1:1"}
	if err := r.SetClockOffset(time.Second); !errors.Is(err, devstore.ErrNoClockShim) {
		t.Errorf("SetClockOffset without the shim = %v, want ErrNoClockShim", err)
	}
}

// TestRedisServers starts independent servers, moves one's clock, and stops
// and starts one.
func TestRedisServers(t *testing.T) {
	s := devstoretest.RedisServers(t, 3)
	ctx := t.Context()
	if len(s.Addrs()) != 3 {
		t.Fatalf("%d servers, want 3", len(s.Addrs()))
	}
	clients := make([]*redis.Client, 3)
	for i, a := range s.Addrs() {
		clients[i] = redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
		t.Cleanup(func() { _ = clients[i].Close() })
		if err := clients[i].Set(ctx, "k", i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Independent: each holds its own value.
	for i, c := range clients {
		if v, err := c.Get(ctx, "k").Int(); err != nil || v != i {
			t.Errorf("server %d: GET k = %d, %v; want %d", i, v, err, i)
		}
	}

	if s.NoClock == nil {
		if err := s.Servers[1].SetClockOffset(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		if sk := serverSkew(t, clients[1]); (sk - 5*time.Second).Abs() > devstore.ClockTolerance {
			t.Errorf("server 1 is %v ahead, want about 5s", sk)
		}
		if sk := serverSkew(t, clients[0]); sk.Abs() > devstore.ClockTolerance {
			t.Errorf("server 0 is %v ahead after server 1's clock moved, want about 0", sk)
		}
	} else {
		t.Logf("clock not tested: %v", s.NoClock)
	}

	if err := s.Servers[2].Stop(); err != nil {
		t.Fatal(err)
	}
	if err := clients[2].Ping(ctx).Err(); err == nil {
		t.Error("a stopped server answers PING")
	}
	if err := clients[0].Ping(ctx).Err(); err != nil {
		t.Errorf("server 0 after server 2 stopped: %v", err)
	}
	if err := s.Servers[2].Start(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := clients[2].Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Errorf("a restarted server has k = %d, %v; want it empty", n, err)
	}
}
