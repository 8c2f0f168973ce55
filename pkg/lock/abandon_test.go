package lock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/locallock"
)

var errLost = errors.New("reply lost (simulated timeout)")

// unanswered is locallock's table whose first TryAcquire reaches the table
// but whose reply is lost: it reports errLost, an unknown outcome, whether
// the table granted the key or refused it. The Locker's clean-up calls
// that come after (TryAcquire, ReleaseOwner) wait until gate is closed;
// cleaned receives a value when one of them has returned.
type unanswered struct {
	*locallock.Backend
	acquires atomic.Int64 // TryAcquire calls
	tookFree atomic.Bool  // a TryAcquire after the first was granted the key
	gate     chan struct{}
	cleaned  chan struct{}

	mu    sync.Mutex
	owner string // the owner of the first call
	lost  uint64 // the token the table granted it, or 0
}

func newUnanswered() *unanswered {
	return &unanswered{Backend: locallock.New(), gate: make(chan struct{}), cleaned: make(chan struct{}, 4)}
}

func (b *unanswered) TryAcquire(ctx context.Context, key, owner string, ttl time.Duration) (uint64, error) {
	if b.acquires.Add(1) == 1 {
		token, _ := b.Backend.TryAcquire(ctx, key, owner, ttl)
		b.mu.Lock()
		b.owner, b.lost = owner, token
		b.mu.Unlock()
		return 0, errLost
	}
	<-b.gate
	token, err := b.Backend.TryAcquire(ctx, key, owner, ttl)
	if err == nil {
		b.tookFree.Store(true)
	}
	return token, err
}

func (b *unanswered) Release(ctx context.Context, key, owner string, token uint64) error {
	err := b.Backend.Release(ctx, key, owner, token)
	b.cleaned <- struct{}{}
	return err
}

func (b *unanswered) ReleaseOwner(ctx context.Context, key, owner string) error {
	<-b.gate
	err := b.Backend.ReleaseOwner(ctx, key, owner)
	b.cleaned <- struct{}{}
	return err
}

func (b *unanswered) first() (owner string, lost uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.owner, b.lost
}

// A lost grant is freed by owner when the caller gives up: the clean-up
// makes no TryAcquire of its own.
func TestAbandonFreesLostGrantWithoutTakingKey(t *testing.T) {
	const ttl = time.Minute // expiry cannot be what frees the key
	b := newUnanswered()
	close(b.gate)
	l, err := lock.New(b, lock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if _, err := l.TryAcquire(ctx, "k"); !errors.Is(err, errLost) {
		t.Fatalf("TryAcquire = %v, want the lost reply", err)
	}
	if _, lost := b.first(); lost == 0 {
		t.Fatal("the table did not grant the attempt")
	}
	var token uint64
	for err = errors.New("not tried"); err != nil; {
		if ctx.Err() != nil {
			t.Fatalf("the lost grant was never freed: %v", err)
		}
		time.Sleep(time.Millisecond)
		token, err = b.Backend.TryAcquire(ctx, "k", "other", ttl)
	}
	_ = b.Backend.Release(ctx, "k", "other", token)
	if n := b.acquires.Load(); n != 1 {
		t.Errorf("TryAcquire was called %d times, want 1: the clean-up took the key to free it", n)
	}
}

// The clean-up of an attempt refused with an unknown outcome runs after
// the holder has released the key: it must not take the free key, which
// would refuse others for as long as it held it.
func TestLateAbandonDoesNotTakeFreeKey(t *testing.T) {
	const ttl = time.Minute
	b := newUnanswered()
	l, err := lock.New(b, lock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	holder, err := b.Backend.TryAcquire(ctx, "k", "holder", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, "k"); !errors.Is(err, errLost) {
		t.Fatalf("TryAcquire = %v, want the lost reply", err)
	}
	if owner, lost := b.first(); owner == "" || lost != 0 {
		t.Fatalf("the attempt reached the table as %q and was granted token %d, want refused", owner, lost)
	}
	// The clean-up is now held at the gate; the holder releases first.
	if err := b.Backend.Release(ctx, "k", "holder", holder); err != nil {
		t.Fatal(err)
	}
	close(b.gate)
	select {
	case <-b.cleaned:
	case <-ctx.Done():
		t.Fatal("the clean-up never ran")
	}
	if b.tookFree.Load() {
		t.Error("the clean-up was granted the free key")
	}
	if n := b.acquires.Load(); n != 1 {
		t.Errorf("TryAcquire was called %d times, want 1: the clean-up took the key to free it", n)
	}
	token, err := b.Backend.TryAcquire(ctx, "k", "other", ttl)
	if err != nil {
		t.Fatalf("after the clean-up, another owner's TryAcquire = %v, want the key", err)
	}
	_ = b.Backend.Release(ctx, "k", "other", token)
}
