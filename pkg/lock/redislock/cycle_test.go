package redislock_test

// Tests of what a contended lock cycle costs the server and of the checks
// that cost nothing extra: a release checks its lease through the fence it
// swaps (lib.lua's pass_on), and a waiter's first attempt on a contended
// key joins the queue in one call (wait.lua).

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/redislock"
)

// notACall lists the commands that do no work of a lock cycle: the
// scripts themselves (their calls are counted one by one), and what
// clients send when they connect and the tests when they measure.
var notACall = []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "script", "info", "hello",
	"client", "ping", "select", "auth", "subscribe", "psubscribe", "unsubscribe", "punsubscribe", "command"}

// commandCalls returns the calls of every command the server has run so
// far (INFO commandstats, which counts the calls scripts make), by
// command name, and in "" those of all commands that are not notACall.
func commandCalls(tb testing.TB, c *redis.Client) map[string]int64 {
	tb.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatalf("INFO commandstats: %v", err)
	}
	calls := map[string]int64{}
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(k, "cmdstat_") {
			continue
		}
		// cmdstat_get:calls=3,usec=... (cmdstat_client|setinfo for a
		// subcommand)
		name, _, _ := strings.Cut(strings.TrimPrefix(k, "cmdstat_"), "|")
		n, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
		count, _ := strconv.ParseInt(n, 10, 64)
		calls[name] += count
		if !slices.Contains(notACall, name) {
			calls[""] += count
		}
	}
	return calls
}

// callsServer returns a redis-server of the test's own, whose command
// counts no other test disturbs.
func callsServer(t *testing.T) *devstore.Redis {
	srv := devstoretest.Redis(t)
	if srv.Kind != devstore.KindRedisServer {
		t.Skipf("counts commands: needs a redis-server of its own, have %s", srv.Kind)
	}
	return srv
}

// TestContendedCycleCalls: with 8 goroutines taking one key in turn, a
// lock cycle costs the server 5 calls when they share a backend (RPUSH;
// LPOP, TIME, SET ... GET, SET) and 6 across backends (PUBLISH): 5.03 and
// 6.03 on a quiet machine. An attempt that finds the queue empty, or a
// release that finds no waiter queued yet, makes a few calls more, and
// how often that happens depends on timing: with eight test binaries
// sharing two cores the mix reached 6.56 across backends. So the bound
// leaves room for that but not for a whole call more per cycle; the exact
// calls of each path are TestHandoffCalls's and TestQueueFirstAttempt's.
func TestContendedCycleCalls(t *testing.T) {
	for _, tc := range []struct {
		name   string
		shared bool
		max    float64
	}{{"one-backend", true, 5.9}, {"8-backends", false, 6.9}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := callsServer(t)
			c := newClient(t, srv.Addr)
			ctx := ctxFor(t, 30*time.Second)
			const goroutines, cycles = 8, 800
			lockers := make([]*lock.Locker, goroutines)
			for i := range lockers {
				if tc.shared && i > 0 {
					lockers[i] = lockers[0]
					continue
				}
				// A backoff far above a cycle: no attempt renews a place
				// (more calls) however slow the machine.
				slow := lock.RetryPolicy{Min: 2 * time.Second, Max: 2 * time.Second}
				l, err := lock.New(newBackend(t, newClient(t, srv.Addr)), lock.WithRetry(slow))
				if err != nil {
					t.Fatal(err)
				}
				lockers[i] = l
			}
			// Warm up: scripts loaded, subscriptions made, the clock read.
			for _, l := range lockers {
				lease, err := l.Acquire(ctx, "cycle")
				if err != nil {
					t.Fatal(err)
				}
				_ = lease.Release(ctx)
			}
			before := commandCalls(t, c)
			var wg sync.WaitGroup
			for _, l := range lockers {
				wg.Go(func() {
					for range cycles / goroutines {
						lease, err := l.Acquire(ctx, "cycle")
						if err != nil {
							t.Error(err)
							return
						}
						if err := lease.Release(ctx); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			after := commandCalls(t, c)
			per := map[string]float64{}
			for name, n := range after {
				if d := n - before[name]; d > 0 && !slices.Contains(notACall, name) {
					per[name] = float64(d) / cycles
				}
			}
			t.Logf("calls per lock cycle: %.2f %v", per[""], per)
			if per[""] > tc.max {
				t.Errorf("%.2f calls per lock cycle, want at most %.1f: %v", per[""], tc.max, per)
			}
		})
	}
}

// TestHandoffCalls: a release that hands the key to a waiter of another
// backend makes exactly the calls of a cycle's release: LPOP (the waiter),
// TIME (the token), SET fence GET (the check of the lease and the new
// grant), SET key (the lease) and PUBLISH (the grant message). The mix a
// contended cycle adds (TestContendedCycleCalls) varies with timing; this
// path does not.
func TestHandoffCalls(t *testing.T) {
	q := newQueuedBehind(t, callsServer(t), "handoff", 10*time.Second, 5*time.Second)
	before := commandCalls(t, q.c)
	if err := q.holder.Release(q.ctx, "handoff", "holder", q.token); err != nil {
		t.Fatal(err)
	}
	after := commandCalls(t, q.c)
	got := map[string]int64{}
	for name, n := range after {
		if d := n - before[name]; d > 0 && name != "" && !slices.Contains(notACall, name) {
			got[name] = d
		}
	}
	want := map[string]int64{"lpop": 1, "time": 1, "set": 2, "publish": 1}
	if !maps.Equal(got, want) {
		t.Errorf("a handoff's calls: %v, want %v", got, want)
	}
}

// TestQueueFirstAttempt: the first attempt of a second waiter on a key
// with a waiter queued already is one RPUSH, and the deadline of its place
// comes from the server's clock as the first waiter's attempt read it: no
// later than the server would have made it itself.
func TestQueueFirstAttempt(t *testing.T) {
	const stay = 5 * time.Second
	q := newQueuedBehind(t, callsServer(t), "first", 10*time.Second, stay)
	c, ctx, prefix, holder, b, token, w1 := q.c, q.ctx, q.prefix, q.holder, q.waiting, q.token, q.w
	time.Sleep(20 * time.Millisecond) // the reading ages; the estimate must follow

	serverMs := func() int64 {
		now, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return now.UnixMilli()
	}
	w2 := b.Waiter("first", "w2")
	defer w2.Close()
	t0 := serverMs()
	calls0 := commandCalls(t, c)
	_, latest, err := w2.Attempt(ctx, 10*time.Second, stay)
	calls1 := commandCalls(t, c)
	t1 := serverMs()
	if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("second waiter's first attempt = %v, want queued", err)
	}
	if latest != 0 {
		t.Errorf("latest = %d, want 0 from a queue-first attempt", latest)
	}
	if d := calls1[""] - calls0[""]; d != 1 || calls1["rpush"]-calls0["rpush"] != 1 {
		t.Errorf("the attempt made %d calls (rpush %d), want one RPUSH", d, calls1["rpush"]-calls0["rpush"])
	}
	places, err := c.LRange(ctx, prefix+"{first}:queue", 0, -1).Result()
	if err != nil || len(places) != 2 {
		t.Fatalf("queue = %q, %v; want two places", places, err)
	}
	d, _, _ := strings.Cut(places[1], ":")
	deadline, _ := strconv.ParseInt(d, 10, 64)
	if max := t1 + stay.Milliseconds(); deadline > max {
		t.Errorf("deadline %d is %d ms later than the server's clock after the attempt plus stay", deadline, deadline-max)
	}
	if min := t0 + stay.Milliseconds() - 50; deadline < min {
		t.Errorf("deadline %d is %d ms before the server's clock before the attempt plus stay", deadline, min+50-deadline)
	}

	// The queue order holds: the release hands the key to w1, then w2.
	if err := holder.Release(ctx, "first", "holder", token); err != nil {
		t.Fatal(err)
	}
	t1tok, _, err := w1.Attempt(ctx, 10*time.Second, stay)
	if err != nil {
		t.Fatalf("first waiter after the release: %v", err)
	}
	if err := b.Release(ctx, "first", "waiter", t1tok); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w2.Attempt(ctx, 10*time.Second, stay); err != nil {
		t.Fatalf("second waiter after the first released: %v", err)
	}
}

// queuedBehind is a key of srv held by "holder" on one backend and a
// waiter of another backend queued behind it, keeping its place for stay.
type queuedBehind struct {
	c               *redis.Client
	prefix          string
	holder, waiting *redislock.Backend
	ctx             context.Context
	token           uint64      // the holder's
	w               lock.Waiter // the waiter's, closed at the end of the test
}

func newQueuedBehind(t *testing.T, srv *devstore.Redis, key string, ttl, stay time.Duration) queuedBehind {
	t.Helper()
	q := queuedBehind{c: newClient(t, srv.Addr), prefix: testPrefix(t, srv.Addr), ctx: ctxFor(t, 10*time.Second)}
	q.holder = newBackend(t, newClient(t, srv.Addr), redislock.WithKeyPrefix(q.prefix))
	q.waiting = newBackend(t, newClient(t, srv.Addr), redislock.WithKeyPrefix(q.prefix))
	var err error
	if q.token, err = q.holder.TryAcquire(q.ctx, key, "holder", ttl); err != nil {
		t.Fatal(err)
	}
	q.w = q.waiting.Waiter(key, "waiter")
	t.Cleanup(q.w.Close)
	queued(t, q.ctx, q.w, stay)
	return q
}

// TestReleaseChecksLeaseWithWaiterQueued: a release that names another
// owner with the holder's token, or the holder with another token, changes
// nothing while a waiter is queued behind a lapsed place: the lock key,
// the fence, the queue (the lapsed place included) and both expiries stay
// as they were.
func TestReleaseChecksLeaseWithWaiterQueued(t *testing.T) {
	q := newQueuedBehind(t, devstoretest.Redis(t), "check", 10*time.Second, time.Minute)
	c, ctx, holder, token, w := q.c, q.ctx, q.holder, q.token, q.w
	lockKey := redislock.KeyName(q.prefix, "check")

	state := func() []string {
		var s []string
		for _, k := range []string{lockKey, lockKey + redislock.DefaultFenceSuffix} {
			v, _ := c.Get(ctx, k).Result()
			s = append(s, v)
		}
		q, _ := c.LRange(ctx, lockKey+":queue", 0, -1).Result()
		return append(s, q...)
	}
	// A lapsed place ahead of the live waiter: a bad release must put it
	// back too, for its waiter to renew where it stands.
	queueKey := lockKey + ":queue"
	if err := c.LPush(ctx, queueKey, "1:1000:ghost:1:ghost").Err(); err != nil {
		t.Fatal(err)
	}
	before := state()
	for _, bad := range []struct {
		owner string
		token uint64
	}{{"intruder", token}, {"holder", token - 1}, {"holder", token + 1}} {
		if err := holder.Release(ctx, "check", bad.owner, bad.token); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("Release(%s, %d) = %v, want ErrNotHeld", bad.owner, bad.token, err)
		}
		if after := state(); !slices.Equal(after, before) {
			t.Fatalf("Release(%s, %d) changed\n%q\nto\n%q", bad.owner, bad.token, before, after)
		}
		if ttl, err := c.PTTL(ctx, lockKey).Result(); err != nil || ttl < 9*time.Second {
			t.Errorf("lock key's expiry after Release(%s, %d) = %v, %v; want about 10s", bad.owner, bad.token, ttl, err)
		}
		if ttl, err := c.PTTL(ctx, queueKey).Result(); err != nil || ttl < 50*time.Second {
			t.Errorf("queue's expiry after Release(%s, %d) = %v, %v; want about a minute", bad.owner, bad.token, ttl, err)
		}
	}
	if err := holder.Release(ctx, "check", "holder", token); err != nil {
		t.Fatal(err)
	}
	if got, _, err := w.Attempt(ctx, 10*time.Second, time.Minute); err != nil || got <= token {
		t.Errorf("waiter after the holder's release = %d, %v; want a token above %d", got, err, token)
	}
}

// TestExpiredLeaseReleaseHandsOn: a holder whose lease expired, with
// nobody granted the key since, learns that from Release (ErrNotHeld), and
// the key, free anyway, goes to the waiter queued for it.
func TestExpiredLeaseReleaseHandsOn(t *testing.T) {
	// Held for 10s while the waiter queues, then cut to the shortest
	// lease: held from the start for MinTTL, the lease could run out
	// before the waiter's first attempt on a loaded machine, and the
	// waiter took the free key instead of queueing.
	q := newQueuedBehind(t, devstoretest.Redis(t), "expired", 10*time.Second, time.Minute)
	ctx, holder, token, w := q.ctx, q.holder, q.token, q.w
	if err := holder.Refresh(ctx, "expired", "holder", token, lock.MinTTL); err != nil {
		t.Fatal(err)
	}
	for n, err := q.c.Exists(ctx, redislock.KeyName(q.prefix, "expired")).Result(); n != 0 || err != nil; n, err = q.c.Exists(ctx, redislock.KeyName(q.prefix, "expired")).Result() {
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(lock.MinTTL / 5)
	}

	if err := holder.Release(ctx, "expired", "holder", token); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Release of an expired lease = %v, want ErrNotHeld", err)
	}
	timeout := time.After(5 * time.Second)
	for {
		select {
		case got := <-w.Granted():
			if got == 0 {
				continue // the subscription is in place: not a grant
			}
			if got <= token {
				t.Errorf("grant %d is not above the expired lease's %d", got, token)
			}
			return
		case <-timeout:
			t.Fatal("the waiter was not handed the key")
		}
	}
}

// TestReleaseOverOldFence: a fence that does not record the lease (of an
// older version of this package, or rolled back) does not stop its holder's
// release from handing the key on, and the waiter's token is above both
// the lease's and the fence's.
func TestReleaseOverOldFence(t *testing.T) {
	q := newQueuedBehind(t, devstoretest.Redis(t), "old", 10*time.Second, time.Minute)
	c, ctx, holder, token, w := q.c, q.ctx, q.holder, q.token, q.w
	prefix := q.prefix
	// The older layout "<token>:<waiter id>", far ahead of the clock.
	ahead := token + uint64(time.Hour/time.Microsecond)
	if err := c.Set(ctx, prefix+"{old}"+redislock.DefaultFenceSuffix, strconv.FormatUint(ahead, 10)+":0123:7", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := holder.Release(ctx, "old", "holder", token); err != nil {
		t.Fatalf("Release over an old fence: %v", err)
	}
	got, _, err := w.Attempt(ctx, 10*time.Second, time.Minute)
	if err != nil {
		t.Fatalf("waiter after the release: %v", err)
	}
	if got <= ahead {
		t.Errorf("handed-over token %d is not above the fence's %d", got, ahead)
	}
}
