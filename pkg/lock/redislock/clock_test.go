package redislock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/redislock"
)

// TestTokensAcrossBackwardClockStep steps a real redis-server's clock back
// by half a minute between grants: the token's clock term (server time in
// microseconds) falls far below the tokens already granted, and only the
// fence keeps them increasing. Grants of every kind before and after the
// step (a free key, a takeover after expiry, a re-grant to the same owner, a
// handoff to a queued waiter) must carry strictly increasing tokens.
func TestTokensAcrossBackwardClockStep(t *testing.T) {
	srv := devstoretest.RedisClock(t)
	c := newClient(t, srv.Addr)
	b := newBackend(t, c, redislock.WithKeyPrefix(testPrefix(t, srv.Addr)))
	ctx := ctxFor(t, 30*time.Second)
	const key = "clock"

	var tokens []uint64
	grant := func(what string, token uint64) {
		t.Helper()
		if n := len(tokens); n > 0 && token <= tokens[n-1] {
			t.Fatalf("%s: token %d is not above the previous %d (all: %v)", what, token, tokens[n-1], tokens)
		}
		tokens = append(tokens, token)
	}
	grants := func(phase string) {
		t.Helper()
		// A free key.
		tok, err := b.TryAcquire(ctx, key, "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		grant(phase+": free key", tok)
		// The same owner again.
		tok, err = b.TryAcquire(ctx, key, "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		grant(phase+": same owner", tok)
		// A handoff: the release grants the key to a queued waiter.
		locker, err := lock.New(b, lock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *lock.Lease, 1)
		go func() {
			l, err := locker.Acquire(ctx, key)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		time.Sleep(100 * time.Millisecond) // let it queue
		if err := b.Release(ctx, key, "a", tok); err != nil {
			t.Fatal(err)
		}
		l := <-got
		if l == nil {
			t.FailNow()
		}
		grant(phase+": handoff", l.Token())
		_ = l.Release(ctx)
		// A takeover after expiry.
		tok, err = b.TryAcquire(ctx, key, "short", lock.MinTTL)
		if err != nil {
			t.Fatal(err)
		}
		grant(phase+": short lease", tok)
		time.Sleep(2 * lock.MinTTL)
		tok, err = b.TryAcquire(ctx, key, "b", time.Minute)
		if err != nil {
			t.Fatalf("takeover after expiry: %v", err)
		}
		grant(phase+": takeover", tok)
		if err := b.Release(ctx, key, "b", tok); err != nil {
			t.Fatal(err)
		}
	}

	grants("before")
	before := tokens[len(tokens)-1]
	if err := srv.SetClockOffset(-30 * time.Second); err != nil {
		t.Fatal(err)
	}
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// The clock term is now below the last token: only the fence counts.
	if clock := uint64(now.UnixMicro()); clock >= before {
		t.Fatalf("server clock %d µs is not below the last token %d after the step back", clock, before)
	}
	grants("after")
	t.Logf("tokens before and after a -30s step: %v", tokens)
}

// TestTokensAfterRestartBehindClock shows the limit the package documents:
// when the fence is lost (a restart without persistence) and the server's
// clock has stepped back, nothing remembers the last token, and the next
// one is lower. A fenced store then refuses the new holder's writes until
// the clock passes the old tokens; the old holder's writes are not
// accepted twice, but progress stops.
func TestTokensAfterRestartBehindClock(t *testing.T) {
	srv := devstoretest.RedisClock(t)
	b := newBackend(t, newClient(t, srv.Addr))
	ctx := ctxFor(t, 30*time.Second)

	first, err := b.TryAcquire(ctx, "restart-behind", "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.SetClockOffset(-30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	var second uint64
	for {
		if second, err = b.TryAcquire(ctx, "restart-behind", "b", time.Minute); err == nil {
			break
		}
		if errors.Is(err, lock.ErrNotAcquired) || ctx.Err() != nil {
			t.Fatalf("TryAcquire after the restart: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // pooled connections died with the server
	}
	if second >= first {
		t.Fatalf("token after a restart behind the clock = %d, not below %d: the documented limit did not show", second, first)
	}
	t.Logf("token before %d, after a restart with the clock 30s behind %d (%v lower)",
		first, second, time.Duration(first-second)*time.Microsecond)
}
