package redislock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/redislock"
)

// queued makes w join key's queue: its attempt must be refused.
func queued(t *testing.T, ctx context.Context, w lock.Waiter, stay time.Duration) {
	t.Helper()
	if _, _, err := w.Attempt(ctx, 10*time.Second, stay); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("waiter's attempt on a held key = %v, want ErrNotAcquired", err)
	}
}

// TestHandoffSkipsCrashedWaiter: a waiter that joined the queue and then
// died (it never attempts again, never leaves) is passed over once its
// place lapses, so it is never handed the key. The live waiter behind it
// gets the key, and after that the key is free for anyone.
func TestHandoffSkipsCrashedWaiter(t *testing.T) {
	srv := devstoretest.Redis(t)
	prefix := testPrefix(t, srv.Addr)
	holder := newBackend(t, newClient(t, srv.Addr), redislock.WithKeyPrefix(prefix))
	live := newBackend(t, newClient(t, srv.Addr), redislock.WithKeyPrefix(prefix))
	ctx := ctxFor(t, 10*time.Second)
	const stay = 100 * time.Millisecond

	token, err := holder.TryAcquire(ctx, "crash", "holder", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The crashed process: its client is gone with it.
	deadC := newClient(t, srv.Addr)
	dead := newBackend(t, deadC, redislock.WithKeyPrefix(prefix))
	queued(t, ctx, dead.Waiter("crash", "dead"), stay)
	_ = dead.Close()
	_ = deadC.Close()

	w := live.Waiter("crash", "live")
	defer w.Close()
	queued(t, ctx, w, time.Minute)
	time.Sleep(2 * stay) // the dead waiter's place lapses; the live one's does not

	if err := holder.Release(ctx, "crash", "holder", token); err != nil {
		t.Fatal(err)
	}
	// Deterministic whatever the message did: the next attempt returns a
	// grant handed to this waiter.
	got, _, err := w.Attempt(ctx, 10*time.Second, time.Minute)
	if err != nil {
		t.Fatalf("live waiter behind a crashed one: %v, want the key", err)
	}
	if got <= token {
		t.Errorf("handed-over token %d is not above %d", got, token)
	}
	if err := live.Release(ctx, "crash", "live", got); err != nil {
		t.Fatal(err)
	}
	// Nobody is queued any more: the key is free, not handed to the dead.
	other := newBackend(t, newClient(t, srv.Addr), redislock.WithKeyPrefix(prefix))
	t3, err := other.TryAcquire(ctx, "crash", "other", time.Second)
	if err != nil {
		t.Fatalf("TryAcquire after the live waiter released: %v (the key went to the crashed waiter)", err)
	}
	_ = other.Release(ctx, "crash", "other", t3)
}

// TestLostHandoffMessageIsClaimed: a waiter whose backend never hears its
// grant (the subscription is closed, as when a message is lost) still gets
// the key, at its next fallback attempt, and it is the grant the release
// made, not a fresh one.
func TestLostHandoffMessageIsClaimed(t *testing.T) {
	srv := devstoretest.Redis(t)
	prefix := testPrefix(t, srv.Addr)
	c := newClient(t, srv.Addr)
	holderB := newBackend(t, newClient(t, srv.Addr), redislock.WithKeyPrefix(prefix))
	deaf := newBackend(t, newClient(t, srv.Addr), redislock.WithKeyPrefix(prefix))
	_ = deaf.Close() // no subscription: every grant message to it is lost
	ctx := ctxFor(t, 10*time.Second)

	holder, err := lock.New(holderB)
	if err != nil {
		t.Fatal(err)
	}
	fast := lock.RetryPolicy{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}
	waiter, err := lock.New(deaf, lock.WithRetry(fast))
	if err != nil {
		t.Fatal(err)
	}
	held, err := holder.Acquire(ctx, "lost")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *lock.Lease, 1)
	go func() {
		l, err := waiter.Acquire(ctx, "lost")
		if err != nil {
			t.Errorf("waiter's Acquire: %v", err)
		}
		got <- l
	}()
	// Release only once the waiter is queued.
	for {
		n, err := c.LLen(ctx, prefix+"{lost}:queue").Result()
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		return
	}
	defer l.Release(ctx)
	// The fence records a handed-over grant as "<token>:<waiter id>:<owner>".
	fence, err := c.Get(ctx, prefix+"{lost}"+redislock.DefaultFenceSuffix).Result()
	if err != nil {
		t.Fatal(err)
	}
	tok, mark, _ := strings.Cut(fence, ":")
	if tok != strconv.FormatUint(l.Token(), 10) || mark == "" {
		t.Errorf("fence = %q, lease token %d: want the lease to be the handed-over grant", fence, l.Token())
	}
	if l.Token() <= held.Token() {
		t.Errorf("token %d is not above the releaser's %d", l.Token(), held.Token())
	}
	if err := l.Refresh(ctx); err != nil {
		t.Errorf("Refresh of the claimed lease: %v", err)
	}
}

// TestLeaveFreesUntakenGrant: a waiter that gives up after the key was
// handed to it, but before it took the grant, frees the key on leaving.
func TestLeaveFreesUntakenGrant(t *testing.T) {
	srv := devstoretest.Redis(t)
	prefix := testPrefix(t, srv.Addr)
	b := newBackend(t, newClient(t, srv.Addr), redislock.WithKeyPrefix(prefix))
	other := newBackend(t, newClient(t, srv.Addr), redislock.WithKeyPrefix(prefix))
	ctx := ctxFor(t, 10*time.Second)

	token, err := other.TryAcquire(ctx, "leave", "holder", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	w := b.Waiter("leave", "quitter")
	queued(t, ctx, w, time.Minute)
	if err := other.Release(ctx, "leave", "holder", token); err != nil {
		t.Fatal(err)
	}
	// The key is now the waiter's, which never takes it.
	if _, err := other.TryAcquire(ctx, "leave", "third", time.Second); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire after a release to a queued waiter = %v, want ErrNotAcquired", err)
	}
	if err := w.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	t3, err := other.TryAcquire(ctx, "leave", "third", time.Second)
	if err != nil {
		t.Fatalf("TryAcquire after the waiter left: %v, want the key", err)
	}
	_ = other.Release(ctx, "leave", "third", t3)
}

// TestTokensIncreaseAcrossHandoffs: goroutines of several backends take
// one key in turn, so that nearly every grant is a handoff, and write down
// each token inside the critical section; halfway the fence counter is
// rolled back, as a restore would. The tokens, in grant order, must
// strictly increase.
func TestTokensIncreaseAcrossHandoffs(t *testing.T) {
	srv := devstoretest.Redis(t)
	prefix := testPrefix(t, srv.Addr)
	c := newClient(t, srv.Addr)
	ctx := ctxFor(t, time.Minute)
	const backends, perBackend, rounds = 3, 3, 40

	var (
		mu     sync.Mutex // guards tokens only; the lock orders them
		tokens []uint64
		wg     sync.WaitGroup
		errs   = make(chan error, backends*perBackend)
	)
	for range backends {
		l, err := lock.New(newBackend(t, newClient(t, srv.Addr), redislock.WithKeyPrefix(prefix)),
			lock.WithRetry(redislock.DefaultRetry))
		if err != nil {
			t.Fatal(err)
		}
		for range perBackend {
			wg.Go(func() {
				for range rounds {
					lease, err := l.Acquire(ctx, "handoff")
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					tokens = append(tokens, lease.Token())
					n := len(tokens)
					mu.Unlock()
					if n == backends*perBackend*rounds/2 {
						if err := c.Set(ctx, prefix+"{handoff}"+redislock.DefaultFenceSuffix, 1, 0).Err(); err != nil {
							errs <- err
						}
					}
					if err := lease.Release(ctx); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("grant %d: token %d is not above the previous %d", i, tokens[i], tokens[i-1])
		}
	}
	// The fence ends at the last token.
	fence, err := c.Get(ctx, prefix+"{handoff}"+redislock.DefaultFenceSuffix).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := strconv.FormatUint(tokens[len(tokens)-1], 10); fence != want && !strings.HasPrefix(fence, want+":") {
		t.Errorf("fence = %q, want the last token %s", fence, want)
	}
}

// TestGivingUpLeavesNothing: waiters of several backends give up after a
// random few milliseconds while the key is handed from one to the next, so
// that some give up just as the key is handed to them. Exclusion holds
// throughout, and once everyone is done the key is free: no grant was
// left with a waiter that had gone.
func TestGivingUpLeavesNothing(t *testing.T) {
	srv := devstoretest.Redis(t)
	prefix := testPrefix(t, srv.Addr)
	ctx := ctxFor(t, time.Minute)
	const backends, perBackend, rounds = 3, 4, 60

	var (
		holders  atomic.Int32
		overlaps atomic.Int32
		acquired atomic.Int32
		wg       sync.WaitGroup
		errs     = make(chan error, backends*perBackend)
	)
	for range backends {
		l, err := lock.New(newBackend(t, newClient(t, srv.Addr), redislock.WithKeyPrefix(prefix)),
			lock.WithRetry(redislock.DefaultRetry))
		if err != nil {
			t.Fatal(err)
		}
		for g := range perBackend {
			wg.Go(func() {
				for i := range rounds {
					wctx, cancel := context.WithTimeout(ctx, time.Duration(1+(g+i)%4)*time.Millisecond)
					lease, err := l.Acquire(wctx, "giveup")
					cancel()
					if err != nil {
						if !errors.Is(err, context.DeadlineExceeded) {
							errs <- err
							return
						}
						continue
					}
					acquired.Add(1)
					if holders.Add(1) > 1 {
						overlaps.Add(1)
					}
					time.Sleep(100 * time.Microsecond)
					holders.Add(-1)
					if err := lease.Release(ctx); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d times two holders at once", n)
	}
	t.Logf("%d of %d acquisitions succeeded before their deadline", acquired.Load(), backends*perBackend*rounds)
	// A waiter whose last attempt timed out cleans up in the background;
	// give that a moment, well under the 10 s TTL a stray grant would
	// hold the key for.
	other := newBackend(t, newClient(t, srv.Addr), redislock.WithKeyPrefix(prefix))
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var token uint64
		if token, err = other.TryAcquire(ctx, "giveup", "last", time.Second); err == nil {
			_ = other.Release(ctx, "giveup", "last", token)
			return
		}
	}
	t.Fatalf("after every waiter gave up or released, the key stayed held: %v", err)
}
