package locktest

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/lock"
)

// testMutualExclusion runs a deliberately racy read-sleep-write on a shared
// counter under the lock, from two lockers (two "processes") and many
// goroutines. Without mutual exclusion the counter loses updates.
func testMutualExclusion(t *testing.T, h Harness) {
	const goroutines = 16
	rounds := 50
	if testing.Short() { // the quick tier: 160 critical sections still show an overlap
		rounds = 10
	}
	lockers := []*lock.Locker{locker(t, h.Backend(t)), locker(t, h.Backend(t))}
	k := key(t)
	var (
		counter  int // deliberately unsynchronised apart from the lock
		holders  atomic.Int32
		overlaps atomic.Int32 // entries that found another holder inside
		wg       sync.WaitGroup
		failures = make(chan error, goroutines)
	)
	for g := range goroutines {
		wg.Go(func() {
			l := lockers[g%len(lockers)]
			for range rounds {
				lease, err := l.Acquire(ctxFor(t, time.Minute), k)
				if err != nil {
					failures <- err
					return
				}
				if holders.Add(1) > 1 {
					overlaps.Add(1)
				}
				v := counter
				time.Sleep(50 * time.Microsecond)
				counter = v + 1
				holders.Add(-1)
				if err := lease.Release(ctxFor(t, 10*time.Second)); err != nil {
					failures <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(failures)
	for err := range failures {
		t.Fatalf("acquire or release failed: %v", err)
	}
	if counter != goroutines*rounds {
		t.Errorf("counter = %d, want %d: updates were lost, so two goroutines held the lock at once", counter, goroutines*rounds)
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d times a goroutine entered the critical section while another was inside, want 0", n)
	}
}

func testTokensIncrease(t *testing.T, h Harness) {
	b := h.Backend(t)
	a, c := locker(t, b), locker(t, h.Backend(t))
	k := key(t)
	ctx := ctxFor(t, time.Minute)
	var last uint64
	next := func(what string, lease *lock.Lease) {
		t.Helper()
		if lease.Token() <= last {
			t.Fatalf("%s: token %d is not above the previous %d", what, lease.Token(), last)
		}
		last = lease.Token()
	}

	l1, err := a.Acquire(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	next("first acquisition", l1)
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := c.Acquire(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	next("after release", l2)
	_ = l2.Release(ctx)

	// Expiry, then takeover by another owner.
	l3, err := a.Acquire(ctx, k, lock.WithTTL(h.TTL), lock.WithRenewal(0))
	if err != nil {
		t.Fatal(err)
	}
	next("third acquisition", l3)
	<-l3.Done()
	l4, err := c.Acquire(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	next("takeover after expiry", l4)
	_ = l4.Release(ctx)

	// Reacquisition by an explicit owner that already holds the key.
	l5, err := a.Acquire(ctx, k, lock.WithOwner("same-owner"))
	if err != nil {
		t.Fatal(err)
	}
	next("explicit owner", l5)
	l6, err := a.TryAcquire(ctx, k, lock.WithOwner("same-owner"))
	if err != nil {
		t.Fatal(err)
	}
	next("same owner again", l6)
	_ = l6.Release(ctx)
	_ = l5.Release(ctx)
}

func testExpiryAndTakeover(t *testing.T, h Harness) {
	first, second := locker(t, h.Backend(t)), locker(t, h.Backend(t))
	k := key(t)
	ctx := ctxFor(t, time.Minute)

	l1, err := first.Acquire(ctx, k, lock.WithTTL(h.TTL), lock.WithRenewal(0))
	if err != nil {
		t.Fatal(err)
	}
	l2, err := second.Acquire(ctx, k) // blocks until l1 expires on the server
	if err != nil {
		t.Fatalf("takeover after expiry: %v", err)
	}
	defer l2.Release(ctx)
	select {
	case <-l1.Done():
	case <-ctx.Done():
		t.Fatal("the expired lease's Done never closed")
	}
	if !errors.Is(l1.Err(), lock.ErrLeaseLost) {
		t.Errorf("expired lease's cause = %v, want ErrLeaseLost", l1.Err())
	}
	if err := l1.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("expired lease's Release = %v, want ErrNotHeld", err)
	}
	if err := l1.Refresh(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("expired lease's Refresh = %v, want ErrNotHeld", err)
	}
	if err := l2.Refresh(ctx); err != nil {
		t.Errorf("new owner's Refresh after the old owner's Release: %v (the old owner changed something)", err)
	}
}

func testWatchdog(t *testing.T, h Harness) {
	b := &counting{Backend: h.Backend(t)}
	holder, other := locker(t, b), locker(t, h.Backend(t))
	k := key(t)
	ctx := ctxFor(t, time.Minute)

	// At least a second: this test asks the watchdog to keep the lease
	// alive, and a renewal that cannot run (a loaded machine's scheduler,
	// GC) for 2/3 of the TTL loses it, correctly. With the suite's 300ms
	// that was 200ms, and redislock's run failed at load average 15-30
	// on two cores.
	ttl := max(h.TTL, time.Second)
	lease, err := holder.Acquire(ctx, k, lock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * ttl)
	for time.Now().Before(deadline) {
		if _, err := other.TryAcquire(ctx, k); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("another owner's TryAcquire while the watchdog renews: %v, want ErrNotAcquired", err)
		}
		time.Sleep(ttl / 4)
	}
	if err := lease.Err(); err != nil {
		t.Fatalf("lease lost although the watchdog was renewing it: %v", err)
	}
	if b.refreshes.Load() == 0 {
		t.Fatal("the watchdog never refreshed a lease held for 3x its TTL")
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(lease.Err(), lock.ErrReleased) {
		t.Errorf("released lease's cause = %v, want ErrReleased", lease.Err())
	}
	after := b.refreshes.Load()
	time.Sleep(2 * ttl)
	if n := b.refreshes.Load(); n != after {
		t.Errorf("the watchdog refreshed %d times after Release", n-after)
	}
	l2, err := other.TryAcquire(ctx, k)
	if err != nil {
		t.Fatalf("TryAcquire after Release: %v", err)
	}
	_ = l2.Release(ctx)
}

func testNonOwner(t *testing.T, h Harness) {
	b := h.Backend(t)
	l := locker(t, b)
	k := key(t)
	ctx := ctxFor(t, time.Minute)
	lease, err := l.Acquire(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)

	intruder := h.Backend(t)
	cases := []struct {
		name  string
		owner string
		token uint64
	}{
		{"other owner, right token", "intruder", lease.Token()},
		{"right owner, stale token", lease.Owner(), lease.Token() - 1},
		{"right owner, future token", lease.Owner(), lease.Token() + 1},
	}
	for _, c := range cases {
		if err := intruder.Release(ctx, k, c.owner, c.token); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("%s: Release = %v, want ErrNotHeld", c.name, err)
		}
		if err := intruder.Refresh(ctx, k, c.owner, c.token, h.TTL); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("%s: Refresh = %v, want ErrNotHeld", c.name, err)
		}
	}
	// Nothing changed: the key is still held, and by the same lease.
	if _, err := intruder.TryAcquire(ctx, k, "intruder", h.TTL); !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("after the intruder's calls, TryAcquire = %v, want ErrNotAcquired", err)
	}
	if err := lease.Refresh(ctx); err != nil {
		t.Errorf("owner's Refresh after the intruder's calls: %v", err)
	}
}

func testCancelledAcquire(t *testing.T, h Harness) {
	// A 1 s cap keeps the "returns within 2x the cap" bound meaningful and
	// still generous enough for one slow attempt on a loaded machine.
	retry := lock.RetryPolicy{Min: 10 * time.Millisecond, Max: time.Second}
	holderL, waiterL := locker(t, h.Backend(t)), locker(t, h.Backend(t), lock.WithRetry(retry))
	k := key(t)
	ctx := ctxFor(t, time.Minute)
	holder, err := holderL.Acquire(ctx, k)
	if err != nil {
		t.Fatal(err)
	}

	// Cancellation.
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := waiterL.Acquire(wctx, k)
		done <- err
	}()
	time.Sleep(retry.Max) // let it back off a few times
	cancelled := time.Now()
	cancel()
	err = <-done
	if waited := time.Since(cancelled); waited > 2*retry.Max {
		t.Errorf("Acquire returned %v after its context was cancelled, want within %v", waited, 2*retry.Max)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Acquire = %v, want context.Canceled", err)
	}

	// Deadline.
	dctx, dcancel := context.WithTimeout(ctx, retry.Max)
	defer dcancel()
	_, err = waiterL.Acquire(dctx, k)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire past its deadline = %v, want context.DeadlineExceeded", err)
	}

	// Neither waiter left a lease behind: once the holder releases, the
	// key is free at the first attempt.
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := locker(t, h.Backend(t)).TryAcquire(ctx, k)
	if err != nil {
		t.Fatalf("TryAcquire after the holder released: %v (a cancelled waiter left a lock behind)", err)
	}
	_ = l.Release(ctx)
}

func testTryAcquire(t *testing.T, h Harness) {
	b := &counting{Backend: h.Backend(t)}
	l, other := locker(t, h.Backend(t)), locker(t, b)
	k := key(t)
	ctx := ctxFor(t, time.Minute)
	lease, err := l.Acquire(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	_, err = other.TryAcquire(ctx, k)
	if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire on a held key = %v, want ErrNotAcquired", err)
	}
	if n := b.acquires.Load(); n != 1 {
		t.Errorf("TryAcquire made %d attempts, want exactly 1", n)
	}
	// A blocking Acquire with a bounded retry policy gives up with the same error.
	_, err = other.Acquire(ctx, k, lock.WithRetry(lock.RetryPolicy{Min: time.Millisecond, Max: 5 * time.Millisecond, Attempts: 3}))
	if !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("Acquire with 3 attempts on a held key = %v, want ErrNotAcquired", err)
	}
}

func testSameOwner(t *testing.T, h Harness) {
	l := locker(t, h.Backend(t), lock.WithOwner("replica-a"))
	k := key(t)
	ctx := ctxFor(t, time.Minute)
	first, err := l.Acquire(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	second, err := l.TryAcquire(ctx, k)
	if err != nil {
		t.Fatalf("the holding owner's TryAcquire = %v, want success", err)
	}
	if second.Token() <= first.Token() {
		t.Errorf("reacquired token %d is not above %d", second.Token(), first.Token())
	}
	if err := first.Refresh(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("superseded lease's Refresh = %v, want ErrNotHeld", err)
	}
	<-first.Done()
	if err := second.Release(ctx); err != nil {
		t.Errorf("current lease's Release: %v", err)
	}
}

func testBadArguments(t *testing.T, h Harness) {
	if _, err := lock.New(nil); !errors.Is(err, lock.ErrBadConfig) {
		t.Errorf("lock.New(nil) = %v, want ErrBadConfig", err)
	}
	if _, err := lock.New(h.Backend(t), lock.WithTTL(-time.Second)); !errors.Is(err, lock.ErrBadTTL) {
		t.Errorf("lock.New with a negative TTL = %v, want ErrBadTTL", err)
	}
	b := &counting{Backend: h.Backend(t)}
	l := locker(t, b)
	ctx := ctxFor(t, time.Minute)
	long := strings.Repeat("k", lock.MaxKeyLen+1)
	cases := []struct {
		name string
		key  string
		opts []lock.Option
		want error
	}{
		{"empty key", "", nil, lock.ErrBadKey},
		{"key over 256 bytes", long, nil, lock.ErrBadKey},
		{"owner over 256 bytes", "k", []lock.Option{lock.WithOwner(long)}, lock.ErrBadOwner},
		{"zero TTL", "k", []lock.Option{lock.WithTTL(0)}, lock.ErrBadTTL},
		{"negative TTL", "k", []lock.Option{lock.WithTTL(-time.Second)}, lock.ErrBadTTL},
		{"TTL under the floor", "k", []lock.Option{lock.WithTTL(l.MinTTL() - time.Millisecond)}, lock.ErrBadTTL},
		{"renewal fraction 1", "k", []lock.Option{lock.WithRenewal(1)}, lock.ErrBadConfig},
		{"retry with no minimum", "k", []lock.Option{lock.WithRetry(lock.RetryPolicy{Max: time.Second})}, lock.ErrBadConfig},
	}
	for _, c := range cases {
		if _, err := l.Acquire(ctx, c.key, c.opts...); !errors.Is(err, c.want) || !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("%s: Acquire = %v, want %v", c.name, err, c.want)
		}
		if _, err := l.TryAcquire(ctx, c.key, c.opts...); !errors.Is(err, c.want) || !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("%s: TryAcquire = %v, want %v", c.name, err, c.want)
		}
	}
	if n := b.calls(); n != 0 {
		t.Errorf("rejected calls reached the server %d times, want 0", n)
	}
	testBackendBadArguments(t, h)
}

// testBackendBadArguments: the backend itself, used without a Locker,
// refuses the same input with the same errors (lock.CheckArgs), whatever
// the call, and changes nothing on the server.
func testBackendBadArguments(t *testing.T, h Harness) {
	b := h.Backend(t)
	ctx := ctxFor(t, time.Minute)
	k := key(t)
	long := strings.Repeat("o", lock.MaxKeyLen+1)
	cases := []struct {
		name, key, owner string
		ttl              time.Duration
		want             error
	}{
		{"empty key", "", "o", h.TTL, lock.ErrBadKey},
		{"key over 256 bytes", long, "o", h.TTL, lock.ErrBadKey},
		{"empty owner", k, "", h.TTL, lock.ErrBadOwner},
		{"owner over 256 bytes", k, long, h.TTL, lock.ErrBadOwner},
		{"zero TTL", k, "o", 0, lock.ErrBadTTL},
		{"negative TTL", k, "o", -h.TTL, lock.ErrBadTTL},
	}
	for _, c := range cases {
		if _, err := b.TryAcquire(ctx, c.key, c.owner, c.ttl); !errors.Is(err, c.want) || !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("%s: Backend.TryAcquire = %v, want %v", c.name, err, c.want)
		}
		if err := b.Refresh(ctx, c.key, c.owner, 1, c.ttl); !errors.Is(err, c.want) || !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("%s: Backend.Refresh = %v, want %v", c.name, err, c.want)
		}
		if c.ttl > 0 { // Release and ReleaseOwner take no TTL
			if err := b.Release(ctx, c.key, c.owner, 1); !errors.Is(err, c.want) || !errors.Is(err, lock.ErrInvalidArgument) {
				t.Errorf("%s: Backend.Release = %v, want %v", c.name, err, c.want)
			}
			if r, ok := b.(lock.OwnerReleaser); ok {
				if err := r.ReleaseOwner(ctx, c.key, c.owner); !errors.Is(err, c.want) || !errors.Is(err, lock.ErrInvalidArgument) {
					t.Errorf("%s: Backend.ReleaseOwner = %v, want %v", c.name, err, c.want)
				}
			}
		}
	}
	// Nothing was granted: another owner takes the key at once.
	token, err := b.TryAcquire(ctx, k, "other", h.TTL)
	if err != nil {
		t.Fatalf("TryAcquire after the rejected calls: %v; a rejected call took the key", err)
	}
	if err := b.Release(ctx, k, "other", token); err != nil {
		t.Errorf("Release: %v", err)
	}
}

// lossy grants for real but reports a lost reply (a timeout) to calls made
// with a context marked by lose: the case where the server granted the key
// and the client never heard. Calls with other contexts pass through, so the
// Locker's own clean-up is not affected.
type lossy struct{ counting }

type loseKey struct{}

func lose(ctx context.Context) context.Context { return context.WithValue(ctx, loseKey{}, true) }

var errReplyLost = errors.New("locktest: reply lost (simulated timeout after the server answered)")

func (b *lossy) TryAcquire(ctx context.Context, key, owner string, ttl time.Duration) (uint64, error) {
	token, err := b.counting.TryAcquire(ctx, key, owner, ttl)
	if err == nil && ctx.Value(loseKey{}) != nil {
		return 0, errReplyLost
	}
	return token, err
}

// testLostReplyLeavesNothing checks that a grant whose reply was lost does
// not keep the key locked until its TTL once the caller gives up.
func testLostReplyLeavesNothing(t *testing.T, h Harness) {
	const ttl = time.Minute // expiry cannot be what frees the key
	b := &lossy{counting{Backend: h.Backend(t)}}
	_, releaser := b.Backend.(lock.OwnerReleaser)
	retry := lock.RetryPolicy{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond}
	l := locker(t, keepOwnerReleaser(b, b.Backend), lock.WithTTL(ttl), lock.WithRetry(retry))
	other := locker(t, h.Backend(t), lock.WithTTL(ttl))
	ctx := ctxFor(t, time.Minute)

	for _, c := range []struct {
		name    string
		acquire func(ctx context.Context, key string) (*lock.Lease, error)
	}{
		{"Acquire", func(ctx context.Context, key string) (*lock.Lease, error) {
			ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			return l.Acquire(ctx, key)
		}},
		{"TryAcquire", func(ctx context.Context, key string) (*lock.Lease, error) {
			return l.TryAcquire(ctx, key)
		}},
	} {
		k := key(t)
		if _, err := c.acquire(lose(ctx), k); !errors.Is(err, errReplyLost) && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s with lost replies = %v, want the lost-reply error or the deadline", c.name, err)
		}
		attempts := b.acquires.Load()
		if attempts == 0 {
			t.Fatalf("%s made no attempt", c.name)
		}
		// The clean-up runs in the background; give it until well before
		// the one-minute TTL could explain a free key.
		var err error
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			var lease *lock.Lease
			if lease, err = other.TryAcquire(ctx, k); err == nil {
				_ = lease.Release(ctx)
				break
			}
		}
		if err != nil {
			t.Errorf("after %s gave up on a grant whose reply was lost, the key stayed locked: %v", c.name, err)
		}
		// Over an OwnerReleaser the clean-up frees the grant by owner: it
		// never takes the key, which could hold it once it was free.
		if n := b.acquires.Load(); releaser && n != attempts {
			t.Errorf("the clean-up after %s called TryAcquire %d times, want 0 (ReleaseOwner)", c.name, n-attempts)
		}
		b.acquires.Store(0)
	}
}

// testReleaseOwner checks lock.OwnerReleaser on a backend that implements
// it: the holder's call frees the key, anyone else's changes nothing, and
// it never takes the key. Bad arguments are checked with the other calls'
// (testBackendBadArguments).
func testReleaseOwner(t *testing.T, h Harness) {
	if _, ok := h.Backend(t).(lock.OwnerReleaser); !ok {
		t.Skip("the backend does not implement lock.OwnerReleaser")
	}
	// Long enough that an expiry cannot be what frees a key here, and whole
	// seconds (etcd).
	const ttl = time.Minute
	backend := func(t *testing.T) (lock.Backend, lock.OwnerReleaser) {
		b := h.Backend(t)
		return b, b.(lock.OwnerReleaser)
	}

	t.Run("HolderFreesKey", func(t *testing.T) {
		b, r := backend(t)
		other, _ := backend(t)
		ctx := ctxFor(t, time.Minute)
		k := key(t)
		token, err := b.TryAcquire(ctx, k, "holder", ttl)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.ReleaseOwner(ctx, k, "holder"); err != nil {
			t.Fatalf("the holder's ReleaseOwner: %v", err)
		}
		next, err := other.TryAcquire(ctx, k, "other", ttl)
		if err != nil {
			t.Fatalf("another owner's TryAcquire after the holder's ReleaseOwner: %v, want the key at once", err)
		}
		if next <= token {
			t.Errorf("token after ReleaseOwner = %d, not above the released %d", next, token)
		}
		if err := b.Refresh(ctx, k, "holder", token, ttl); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("the released lease's Refresh = %v, want ErrNotHeld", err)
		}
		// A second call by the former holder changes nothing.
		if err := r.ReleaseOwner(ctx, k, "holder"); err != nil {
			t.Errorf("the former holder's second ReleaseOwner: %v, want nil", err)
		}
		if err := other.Refresh(ctx, k, "other", next, ttl); err != nil {
			t.Errorf("the new holder's Refresh after the former holder's ReleaseOwner: %v", err)
		}
		if err := other.Release(ctx, k, "other", next); err != nil {
			t.Errorf("the new holder's Release: %v", err)
		}
	})

	t.Run("NonHolderChangesNothing", func(t *testing.T) {
		b, _ := backend(t)
		_, intruder := backend(t)
		ctx := ctxFor(t, time.Minute)
		k := key(t)
		token, err := b.TryAcquire(ctx, k, "holder", ttl)
		if err != nil {
			t.Fatal(err)
		}
		// Owners that share a prefix, a suffix or the value's separator
		// with the holder's.
		for _, owner := range []string{"intruder", "holde", "older", "holder:", ":holder", strconv.FormatUint(token, 10) + ":holder"} {
			if err := intruder.ReleaseOwner(ctx, k, owner); err != nil {
				t.Errorf("ReleaseOwner by %q, which does not hold the key = %v, want nil", owner, err)
			}
		}
		if _, err := b.TryAcquire(ctx, k, "other", ttl); !errors.Is(err, lock.ErrNotAcquired) {
			t.Errorf("after the non-holders' ReleaseOwner, another owner's TryAcquire = %v, want ErrNotAcquired", err)
		}
		if err := b.Refresh(ctx, k, "holder", token, ttl); err != nil {
			t.Errorf("the holder's Refresh after the non-holders' ReleaseOwner: %v", err)
		}
		if err := b.Release(ctx, k, "holder", token); err != nil {
			t.Errorf("the holder's Release after the non-holders' ReleaseOwner: %v", err)
		}
	})

	t.Run("FreeKeyStaysFree", func(t *testing.T) {
		b, r := backend(t)
		ctx := ctxFor(t, time.Minute)
		never, released := key(t), key(t)
		token, err := b.TryAcquire(ctx, released, "owner", ttl)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Release(ctx, released, "owner", token); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{never, released} {
			if err := r.ReleaseOwner(ctx, k, "owner"); err != nil {
				t.Errorf("ReleaseOwner on free key %q = %v, want nil", k, err)
			}
			// Not granted to "owner": another owner takes it at once.
			next, err := b.TryAcquire(ctx, k, "other", ttl)
			if err != nil {
				t.Errorf("another owner's TryAcquire on %q after ReleaseOwner on the free key: %v, want the key", k, err)
				continue
			}
			if err := b.Release(ctx, k, "other", next); err != nil {
				t.Errorf("Release: %v", err)
			}
		}
	})

	if _, ok := h.Backend(t).(lock.Handoff); ok {
		t.Run("HandsOffToQueuedWaiter", func(t *testing.T) { testReleaseOwnerHandsOff(t, h, ttl) })
	}
}

// testReleaseOwnerHandsOff: on a Handoff backend, the holder's ReleaseOwner
// hands the key to the waiter queued for it, as Release does, instead of
// freeing it.
func testReleaseOwnerHandsOff(t *testing.T, h Harness, ttl time.Duration) {
	holder, waiting, other := h.Backend(t), h.Backend(t), h.Backend(t)
	ctx := ctxFor(t, time.Minute)
	k := key(t)
	token, err := holder.TryAcquire(ctx, k, "holder", ttl)
	if err != nil {
		t.Fatal(err)
	}
	const stay = 30 * time.Second // the place cannot lapse during the test
	w := waiting.(lock.Handoff).Waiter(k, "waiter")
	defer w.Close()
	if _, _, err := w.Attempt(ctx, ttl, stay); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("the waiter's first Attempt = %v, want ErrNotAcquired (queued)", err)
	}
	if err := holder.(lock.OwnerReleaser).ReleaseOwner(ctx, k, "holder"); err != nil {
		t.Fatalf("the holder's ReleaseOwner: %v", err)
	}
	if _, err := other.TryAcquire(ctx, k, "other", ttl); !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("another owner's TryAcquire after ReleaseOwner with a waiter queued = %v, want ErrNotAcquired (handed to the waiter)", err)
	}
	// The next Attempt returns a grant already handed to the waiter.
	got, _, err := w.Attempt(ctx, ttl, stay)
	if err != nil {
		t.Fatalf("the waiter's Attempt after ReleaseOwner = %v, want the grant handed to it", err)
	}
	if got <= token {
		t.Errorf("handed-over token %d is not above the released %d", got, token)
	}
	if err := waiting.Release(ctx, k, "waiter", got); err != nil {
		t.Errorf("the waiter's Release of the handed-over grant: %v", err)
	}
}
