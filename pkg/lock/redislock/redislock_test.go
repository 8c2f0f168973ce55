package redislock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
	"github.com/stocklock/stocklock/internal/testskip"
	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/locktest"
	"github.com/stocklock/stocklock/pkg/lock/redislock"
)

// The clients the package documents as satisfying Client.
var (
	_ redislock.Client = (*redis.Client)(nil)
	_ redislock.Client = (*redis.ClusterClient)(nil)
	_ redislock.Client = redis.UniversalClient(nil)
)

// randHex returns n random bytes in hex, to keep keys of tests that share
// an external Redis (REDIS_ADDR) apart.
func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// testPrefix returns a fresh key prefix, and deletes its keys after the test:
// fence keys are never deleted otherwise, and an external Redis is shared.
func testPrefix(t testing.TB, addr string) string {
	prefix := "stocklock-test:" + randHex(4) + ":"
	t.Cleanup(func() { deleteKeys(t, addr, prefix+"*") })
	return prefix
}

func deleteKeys(t testing.TB, addr, pattern string) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := c.Scan(ctx, 0, pattern, 100).Iterator()
	for iter.Next(ctx) {
		_ = c.Del(ctx, iter.Val()).Err()
	}
}

func newClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newBackend(t testing.TB, c redislock.Client, opts ...redislock.Option) *redislock.Backend {
	t.Helper()
	b, err := redislock.New(c, opts...)
	if err != nil {
		t.Fatalf("redislock.New: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestConformance(t *testing.T) {
	srv := devstoretest.Redis(t)
	t.Logf("Redis: %s at %s", srv.Kind, srv.Addr)
	prefix := testPrefix(t, srv.Addr)
	locktest.Run(t, locktest.Harness{Backend: func(t *testing.T) lock.Backend {
		// Each call is a separate "process": its own connection pool and
		// its own subscription.
		return newBackend(t, newClient(t, srv.Addr), redislock.WithKeyPrefix(prefix))
	}})
}

func TestNewRejectsBadArguments(t *testing.T) {
	if _, err := redislock.New(nil); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("New(nil) = %v, want ErrInvalidArgument", err)
	}
	if _, err := redislock.NewLocker(nil); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("NewLocker(nil) = %v, want ErrInvalidArgument", err)
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	for _, opt := range []redislock.Option{
		redislock.WithKeyPrefix("app:{x}:"),
		redislock.WithFenceSuffix(""),
		redislock.WithFenceSuffix(":fence}"),
		redislock.WithFenceSuffix(":{fence"),
		redislock.WithFenceSuffix(":waiters"),
	} {
		if _, err := redislock.New(c, opt); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("New with a bad option = %v, want ErrInvalidArgument", err)
		}
	}
	b := newBackend(t, c)
	ctx := ctxFor(t, time.Second)
	if _, err := b.TryAcquire(ctx, "k", "", time.Second); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("TryAcquire with an empty owner = %v, want ErrInvalidArgument", err)
	}
	if _, err := b.TryAcquire(ctx, "k", "o", 0); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("TryAcquire with a zero TTL = %v, want ErrInvalidArgument", err)
	}
}

// TestTTLIsMilliseconds checks that the lease is set with PX: a TTL that is
// not a whole number of seconds must not be rounded to one.
func TestTTLIsMilliseconds(t *testing.T) {
	srv := devstoretest.Redis(t)
	c := newClient(t, srv.Addr)
	prefix := testPrefix(t, srv.Addr)
	b := newBackend(t, c, redislock.WithKeyPrefix(prefix))
	ctx := ctxFor(t, 10*time.Second)
	lockKey := prefix + "{ttl}"

	check := func(what string, lo, hi time.Duration) {
		t.Helper()
		pttl, err := c.PTTL(ctx, lockKey).Result()
		if err != nil {
			t.Fatal(err)
		}
		if pttl <= lo || pttl > hi {
			t.Errorf("%s: PTTL = %v, want in (%v, %v]", what, pttl, lo, hi)
		}
	}
	token, err := b.TryAcquire(ctx, "ttl", "owner", 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	check("after acquire with 1500ms", time.Second, 1500*time.Millisecond)
	// The layout the scripts compare against, with the token printed in
	// full (not as a float), and floored at the server's clock.
	tok := strconv.FormatUint(token, 10)
	if v, err := c.Get(ctx, lockKey).Result(); err != nil || v != tok+":owner" {
		t.Errorf("lock key = %q, %v; want %q", v, err, tok+":owner")
	}
	// The fence records the grant: token, waiter (none), owner.
	if v, err := c.Get(ctx, lockKey+redislock.DefaultFenceSuffix).Result(); err != nil || v != tok+"::owner" {
		t.Errorf("fence key = %q, %v; want %q", v, err, tok+"::owner")
	}
	if d := time.Duration(int64(token)-time.Now().UnixMicro()) * time.Microsecond; d.Abs() > time.Hour {
		t.Errorf("token %d is %v away from the clock in microseconds", token, d)
	}
	if err := b.Refresh(ctx, "ttl", "owner", token, 2700*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	check("after refresh with 2700ms", 2*time.Second, 2700*time.Millisecond)
	// The fence counter never expires.
	if ttl, err := c.PTTL(ctx, lockKey+redislock.DefaultFenceSuffix).Result(); err != nil || ttl != -1 {
		t.Errorf("fence key PTTL = %v, %v; want -1 (no expiry)", ttl, err)
	}
	if err := b.Release(ctx, "ttl", "owner", token); err != nil {
		t.Fatal(err)
	}
}

// TestTokensSurviveRestart restarts a Redis without persistence, which loses
// every key including the fence counters: tokens must still increase.
func TestTokensSurviveRestart(t *testing.T) {
	srv := devstoretest.Redis(t)
	switch srv.Kind {
	case devstore.KindRedisServer:
	case devstore.KindMiniredis:
		testskip.Missing(t, testskip.RedisServer, "miniredis stands in for it and cannot be restarted")
	default:
		t.Skipf("needs a redis-server started by devstore, have %s", srv.Kind)
	}
	b := newBackend(t, newClient(t, srv.Addr))
	ctx := ctxFor(t, 30*time.Second)

	before, err := b.TryAcquire(ctx, "restart", "first", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	// Pooled connections died with the server; the first command on one may
	// fail before go-redis notices.
	var after uint64
	for {
		if after, err = b.TryAcquire(ctx, "restart", "second", 10*time.Second); err == nil {
			break
		}
		if errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("the key survived a restart without persistence: %v", err)
		}
		if ctx.Err() != nil {
			t.Fatalf("TryAcquire after restart: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if after <= before {
		t.Errorf("token after restart = %d, want > %d", after, before)
	}
}

// TestTokensSurviveStaleCounter rolls the fence counter back, as a restore
// from an older snapshot or a failover to a lagging replica would.
func TestTokensSurviveStaleCounter(t *testing.T) {
	srv := devstoretest.Redis(t)
	c := newClient(t, srv.Addr)
	prefix := testPrefix(t, srv.Addr)
	b := newBackend(t, c, redislock.WithKeyPrefix(prefix))
	ctx := ctxFor(t, 10*time.Second)

	var last uint64
	for i := range 3 {
		token, err := b.TryAcquire(ctx, "stale", "owner", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if token <= last {
			t.Fatalf("grant %d: token %d is not above %d", i, token, last)
		}
		last = token
	}
	if err := c.Set(ctx, prefix+"{stale}"+redislock.DefaultFenceSuffix, 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	token, err := b.TryAcquire(ctx, "stale", "owner", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if token <= last {
		t.Errorf("token after the counter went back = %d, want > %d", token, last)
	}
}

func TestOwnerWithColons(t *testing.T) {
	srv := devstoretest.Redis(t)
	b := newBackend(t, newClient(t, srv.Addr), redislock.WithKeyPrefix(testPrefix(t, srv.Addr)))
	ctx := ctxFor(t, 10*time.Second)

	t1, err := b.TryAcquire(ctx, "colons", "host:42:abc", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Only the exact owner is re-granted, not one that is a suffix of it.
	if _, err := b.TryAcquire(ctx, "colons", "42:abc", time.Second); !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("suffix owner's TryAcquire = %v, want ErrNotAcquired", err)
	}
	t2, err := b.TryAcquire(ctx, "colons", "host:42:abc", time.Second)
	if err != nil {
		t.Fatalf("same owner's TryAcquire: %v", err)
	}
	if t2 <= t1 {
		t.Errorf("re-granted token %d is not above %d", t2, t1)
	}
	if err := b.Release(ctx, "colons", "host:42:abc", t1); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("superseded lease's Release = %v, want ErrNotHeld", err)
	}
	if err := b.Release(ctx, "colons", "host:42:abc", t2); err != nil {
		t.Errorf("current lease's Release: %v", err)
	}
}

// waitSubscribed waits until n backends with this key prefix listen for
// releases, so that a test does not release before its waiter listens. A
// PUBLISH answers how many subscribers received it; the probe key has no
// waiters, so the message wakes nobody.
func waitSubscribed(t *testing.T, c *redis.Client, prefix string, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := c.Publish(context.Background(), prefix+"released:probe-"+randHex(4), "").Result()
		if err == nil && got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a release on prefix %q reaches %d subscribers (%v), want >= %d", prefix, got, err, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitGrantSubscribed waits until n backends with this key prefix listen
// for their grants (a Locker's Acquire subscribes to those only).
func waitGrantSubscribed(t *testing.T, c *redis.Client, prefix string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := c.PubSubChannels(context.Background(), prefix+"granted:*").Result()
		if err == nil && len(got) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d backends on prefix %q listen for grants (%v), want >= %d", len(got), prefix, err, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestWatchReportsRelease(t *testing.T) {
	srv := devstoretest.Redis(t)
	prefix := testPrefix(t, srv.Addr)
	watchC := newClient(t, srv.Addr)
	watcher := newBackend(t, watchC, redislock.WithKeyPrefix(prefix))
	releaser := newBackend(t, newClient(t, srv.Addr), redislock.WithKeyPrefix(prefix))
	ctx := ctxFor(t, 10*time.Second)

	released, stop := watcher.Watch(ctx, "watched")
	defer stop()
	other, stopOther := watcher.Watch(ctx, "other")
	defer stopOther()
	waitSubscribed(t, watchC, prefix, 1)
	// A confirmed subscription signals every watched key once, in case a
	// release was missed before it; consume those signals first.
	for _, ch := range []<-chan struct{}{released, other} {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatal("no signal when the subscription was confirmed")
		}
	}

	token, err := releaser.TryAcquire(ctx, "watched", "owner", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// A waiter is refused before it waits; only then is a release published.
	if _, err := watcher.TryAcquire(ctx, "watched", "waiter", 5*time.Second); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("waiter's TryAcquire = %v, want ErrNotAcquired", err)
	}
	if err := releaser.Release(ctx, "watched", "owner", token); err != nil {
		t.Fatal(err)
	}
	select {
	case <-released:
	case <-time.After(2 * time.Second):
		t.Fatal("no notification within 2s of a release by another backend")
	}
	select {
	case <-other:
		t.Error("a watch on another key was notified")
	case <-time.After(50 * time.Millisecond):
	}
}

// TestStuckWatcherDoesNotBlockOthers: a release signals one watcher, and
// none while another's signal is pending; a watcher that never reads must
// not keep the ones behind it from being signalled for long.
func TestStuckWatcherDoesNotBlockOthers(t *testing.T) {
	srv := devstoretest.Redis(t)
	b := newBackend(t, newClient(t, srv.Addr), redislock.WithKeyPrefix(testPrefix(t, srv.Addr)))
	ctx := ctxFor(t, 10*time.Second)

	_, stopStuck := b.Watch(ctx, "stuck") // never read
	defer stopStuck()
	next, stopNext := b.Watch(ctx, "stuck")
	defer stopNext()
	release := func() {
		t.Helper()
		token, err := b.TryAcquire(ctx, "stuck", "owner", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Release(ctx, "stuck", "owner", token); err != nil {
			t.Fatal(err)
		}
	}
	release() // signals the stuck watcher, the oldest
	select {
	case <-next:
		t.Fatal("the second watcher was signalled while the first one's signal was fresh")
	case <-time.After(100 * time.Millisecond):
	}
	time.Sleep(time.Second) // the stuck watcher's signal goes stale
	release()
	select {
	case <-next:
	case <-time.After(2 * time.Second):
		t.Fatal("a watcher that never reads held back the next one's signal")
	}
}

// TestPublishOnlyWhenWaitedFor checks that a release sends a message (which
// every backend receives) only when another backend waits for the key.
func TestPublishOnlyWhenWaitedFor(t *testing.T) {
	srv := devstoretest.Redis(t)
	c := newClient(t, srv.Addr)
	prefix := testPrefix(t, srv.Addr)
	b := newBackend(t, c, redislock.WithKeyPrefix(prefix))
	other := newBackend(t, newClient(t, srv.Addr), redislock.WithKeyPrefix(prefix))
	ctx := ctxFor(t, 10*time.Second)

	ps := c.PSubscribe(ctx, prefix+"released:*")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription confirmation
		t.Fatal(err)
	}
	messages := ps.Channel()
	expect := func(what string, want bool) {
		t.Helper()
		select {
		case m := <-messages:
			if !want {
				t.Errorf("%s: got a message on %s", what, m.Channel)
			}
		case <-time.After(300 * time.Millisecond):
			if want {
				t.Errorf("%s: no message", what)
			}
		}
	}

	token, err := b.TryAcquire(ctx, "quiet", "owner", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, "quiet", "owner", token); err != nil {
		t.Fatal(err)
	}
	expect("uncontended release", false)

	// Contended within the releasing backend only: it wakes its own.
	if token, err = b.TryAcquire(ctx, "quiet", "owner", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(ctx, "quiet", "waiter", 5*time.Second); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("waiter's TryAcquire = %v, want ErrNotAcquired", err)
	}
	if err := b.Release(ctx, "quiet", "owner", token); err != nil {
		t.Fatal(err)
	}
	expect("release with a waiter in the same backend", false)

	if token, err = b.TryAcquire(ctx, "quiet", "owner", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := other.TryAcquire(ctx, "quiet", "waiter", 5*time.Second); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("other backend's TryAcquire = %v, want ErrNotAcquired", err)
	}
	// The mark expires by itself: nothing deletes it.
	if ttl, err := c.PTTL(ctx, prefix+"{quiet}:waiters").Result(); err != nil || ttl <= 0 || ttl > time.Minute {
		t.Errorf("waiters key PTTL = %v, %v; want in (0, 1m]", ttl, err)
	}
	if err := b.Release(ctx, "quiet", "owner", token); err != nil {
		t.Fatal(err)
	}
	expect("release with a waiter in another backend", true)
}

// TestReleaseWakesWaiter gives the waiter a 10 s backoff: if it acquires
// promptly after the release, the notification woke it.
func TestReleaseWakesWaiter(t *testing.T) {
	srv := devstoretest.Redis(t)
	for _, tc := range []struct {
		name        string
		sameBackend bool // local wake-up instead of pub/sub
	}{
		{"OtherBackend", false},
		{"SameBackend", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := testPrefix(t, srv.Addr)
			waitC := newClient(t, srv.Addr)
			waitB := newBackend(t, waitC, redislock.WithKeyPrefix(prefix))
			holdB := waitB
			if !tc.sameBackend {
				holdB = newBackend(t, newClient(t, srv.Addr), redislock.WithKeyPrefix(prefix))
			}
			holder, err := lock.New(holdB)
			if err != nil {
				t.Fatal(err)
			}
			slow := lock.RetryPolicy{Min: 10 * time.Second, Max: 10 * time.Second}
			waiter, err := lock.New(waitB, lock.WithRetry(slow))
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxFor(t, 10*time.Second)
			lease, err := holder.Acquire(ctx, "wake")
			if err != nil {
				t.Fatal(err)
			}

			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			got := make(chan error, 1)
			var acquiredAt time.Time
			go func() {
				l, err := waiter.Acquire(wctx, "wake")
				acquiredAt = time.Now()
				if err == nil {
					_ = l.Release(ctx)
				}
				got <- err
			}()
			waitGrantSubscribed(t, waitC, prefix, 1)
			time.Sleep(100 * time.Millisecond) // let the first attempt fail

			releasedAt := time.Now()
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatalf("waiter did not acquire before its 5s context ended: %v", err)
			}
			if d := acquiredAt.Sub(releasedAt); d > time.Second {
				t.Errorf("waiter acquired %v after the release, want well under its 10s backoff", d)
			}
		})
	}
}

// goroutinesSettle waits until at most n goroutines run, and fails with a
// dump of the extra ones otherwise.
func goroutinesSettle(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines, want <= %d:\n%s", runtime.NumGoroutine(), n, buf)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestNoGoroutineLeak(t *testing.T) {
	srv := devstoretest.Redis(t)
	t.Run("Close", func(t *testing.T) {
		before := runtime.NumGoroutine()
		c := redis.NewClient(&redis.Options{Addr: srv.Addr})
		defer c.Close()
		prefix := testPrefix(t, srv.Addr)
		b, err := redislock.New(c, redislock.WithKeyPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		var stops []func()
		for i := range 10 {
			_, stop := b.Watch(context.Background(), strings.Repeat("k", i+1))
			stops = append(stops, stop)
		}
		waitSubscribed(t, c, prefix, 1)
		for _, stop := range stops {
			stop()
			stop() // idempotent
		}
		_ = b.Close()
		_ = b.Close()
		_ = c.Close()
		goroutinesSettle(t, before)
	})
	t.Run("ClientClosed", func(t *testing.T) {
		// A Locker from NewLocker has no Close: its subscription must end
		// with the client.
		before := runtime.NumGoroutine()
		c := redis.NewClient(&redis.Options{Addr: srv.Addr})
		l, err := redislock.NewLocker(c)
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxFor(t, 10*time.Second)
		key := "leak-" + randHex(4)
		t.Cleanup(func() { deleteKeys(t, srv.Addr, redislock.DefaultKeyPrefix+"{"+key+"}*") })
		lease, err := l.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		waitGrantSubscribed(t, c, redislock.DefaultKeyPrefix, 1)
		_ = c.Close()
		goroutinesSettle(t, before)
	})
	t.Run("WatchAfterClose", func(t *testing.T) {
		c := newClient(t, srv.Addr)
		b := newBackend(t, c)
		_ = b.Close()
		ch, stop := b.Watch(context.Background(), "k")
		stop()
		if ch != nil {
			select {
			case <-ch:
				t.Error("Watch after Close fired")
			default:
			}
		}
	})
}
