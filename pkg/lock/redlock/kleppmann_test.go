package redlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
	"github.com/stocklock/stocklock/pkg/lock"
)

// TestKleppmannClockJump reproduces, with real processes, the scenario of
// Martin Kleppmann's "How to do distributed locking": client A holds the
// lock on servers 0, 1 and 2 (3 and 4 were unreachable when it asked);
// server 2's clock jumps forward past the TTL, so A's key there expires;
// servers 0 and 1 become unreachable; client B then wins 2, 3 and 4, a
// majority, while A's lease has most of its TTL left. Both hold the lock at
// once. What still protects the data is the fencing token: the two
// majorities share server 2, whose fence survived the jump, so B's token is
// higher than A's and a fenced store refuses A's late write.
func TestKleppmannClockJump(t *testing.T) {
	s := devstoretest.RedisServers(t, 5)
	if s.NoClock != nil {
		devstoretest.SkipNoClock(t, s.NoClock)
	}
	const (
		ttl = 2 * time.Second
		key = "sku-1"
	)
	ctx := t.Context()
	prefix := testPrefix()
	lockerFor := func() *lock.Locker {
		// No renewal: A's belief rests on its TTL alone, as in the article.
		l, err := lock.New(newBackend(t, s.Addrs(), prefix), lock.WithTTL(ttl), lock.WithRenewal(0))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a, b := lockerFor(), lockerFor()
	// Each locker dials every server first. A round waits for each server
	// a tenth of the TTL (200 ms), and a cold connection's dial and
	// handshake count against it: on a loaded machine under the race
	// detector, A's first round once found none of its three servers in
	// time ("too few servers answered: 0 of 5").
	for _, l := range []*lock.Locker{a, b} {
		lease, err := l.TryAcquire(ctx, "warm-up")
		if err != nil {
			t.Fatalf("warm-up: %v", err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("warm-up release: %v", err)
		}
	}
	direct := clients(t, s.Addrs())
	holds := func(i int, lease *lock.Lease) bool {
		v, err := direct[i].Get(ctx, prefix+key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("GET on server %d: %v", i, err)
		}
		return v != "" && lease != nil && v == tokenValue(lease)
	}
	stop := func(servers ...int) {
		t.Helper()
		for _, i := range servers {
			if err := s.Servers[i].Stop(); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Servers 3 and 4 run half a minute behind. That alone breaks nothing:
	// Redlock needs clocks to run at the same rate, not to agree. It keeps
	// the clock term of the tokens out of the way, so that what orders A's
	// and B's tokens below is the fence alone.
	for _, i := range []int{3, 4} {
		if err := s.Servers[i].SetClockOffset(-30 * time.Second); err != nil {
			t.Fatal(err)
		}
	}

	// A locks while 3 and 4 are down: it holds 0, 1 and 2.
	stop(3, 4)
	leaseA, err := a.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("A: %v", err)
	}
	grantedA := time.Now()
	for _, i := range []int{3, 4} {
		if err := s.Servers[i].Start(ctx); err != nil { // back, empty
			t.Fatal(err)
		}
	}
	for i := range 5 {
		if want := i <= 2; holds(i, leaseA) != want {
			t.Fatalf("server %d holds A's lease: %v, want %v", i, !want, want)
		}
	}

	// 0 and 1 become unreachable. Without a clock jump B cannot win:
	// server 2 still holds A's key, so B reaches only 3 and 4.
	stop(0, 1)
	// (An explicit owner: the Locker does not abandon its failed attempt
	// in the background, which could otherwise race B's next one.)
	if _, err := b.TryAcquire(ctx, key, lock.WithOwner("client-b")); err == nil {
		t.Fatal("B won a majority before any clock jumped")
	} else {
		t.Logf("B before the jump: %v", err)
	}

	// Server 2's clock jumps past the TTL: A's key there expires at once.
	if err := s.Servers[2].SetClockOffset(ttl + time.Second); err != nil {
		t.Fatal(err)
	}
	if holds(2, leaseA) {
		t.Fatal("server 2 still holds A's key after its clock jumped past the TTL")
	}
	// Then NTP steps it back, overshooting to where 3 and 4 are.
	if err := s.Servers[2].SetClockOffset(-30 * time.Second); err != nil {
		t.Fatal(err)
	}

	leaseB, err := b.TryAcquire(ctx, key, lock.WithOwner("client-b"))
	if err != nil {
		t.Fatalf("B after server 2's clock jump: %v", err)
	}
	grantedB := time.Now()

	// Two holders at once: B was granted the key, and A, whose lease has
	// not expired by its own clock, still believes it holds it.
	if err := leaseA.Err(); err != nil {
		t.Fatalf("A's lease ended (%v); the double grant was not observed", err)
	}
	if left := time.Until(leaseA.Expiry()); left <= 0 {
		t.Fatalf("A's lease expired %v ago; the double grant was not observed", -left)
	}
	if err := leaseB.Err(); err != nil {
		t.Fatalf("B's lease: %v", err)
	}
	t.Logf("double grant: A token %d (granted %v before B, %v of its TTL left), B token %d on servers 2, 3, 4",
		leaseA.Token(), grantedB.Sub(grantedA).Round(time.Millisecond), time.Until(leaseA.Expiry()).Round(time.Millisecond), leaseB.Token())

	// The fence still orders them: server 2, in both majorities, kept A's
	// token through the clock jump, and every clock B reached is behind,
	// so B's token is A's plus one. A store that keeps the highest token
	// it has seen takes B's write and refuses A's.
	if leaseB.Token() != leaseA.Token()+1 {
		t.Fatalf("B's token %d is not A's %d plus one: the fence on server 2 did not order them", leaseB.Token(), leaseA.Token())
	}
	var seen uint64
	write := func(token uint64) bool {
		if token < seen {
			return false
		}
		seen = token
		return true
	}
	if !write(leaseB.Token()) || write(leaseA.Token()) {
		t.Fatal("the fenced store did not refuse A's write after B's")
	}
}

// tokenValue is what the backend stores in a lease's key.
func tokenValue(l *lock.Lease) string {
	return formatUint(l.Token()) + ":" + l.Owner()
}
