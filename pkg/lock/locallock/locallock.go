// Package locallock is an in-process lock behind the lock.Backend contract.
//
// It is correct inside one process and useless across two: each replica of a
// service has its own table of locks, so both replicas can "hold" the same
// key at once. The stock service offers it as a strategy to show exactly
// that oversell.
//
// Nothing waits on a caller's behalf: a blocked lock.Locker.Acquire sleeps
// on its context, a release notification or its backoff, and when the
// context ends it simply stops, so a caller that gave up can never be
// granted the key afterwards and hold it forever.
package locallock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/stocklock/stocklock/pkg/lock"
)

// Backend is the in-process lock table. The zero value is not usable; call New.
type Backend struct {
	mu      sync.Mutex
	entries map[string]*entry
	now     func() time.Time
}

type entry struct {
	owner   string
	token   uint64 // last granted; kept after release so tokens never repeat
	expiry  time.Time
	waiters chan struct{} // closed and replaced at every release
}

// New returns an empty lock table.
func New() *Backend {
	return &Backend{entries: make(map[string]*entry), now: time.Now}
}

// NewLocker returns a lock.Locker over a new in-process table.
func NewLocker(opts ...lock.Option) (*lock.Locker, error) {
	return lock.New(New(), opts...)
}

var (
	_ lock.Backend       = (*Backend)(nil)
	_ lock.Notifier      = (*Backend)(nil)
	_ lock.OwnerReleaser = (*Backend)(nil)
)

func (b *Backend) entry(key string) *entry {
	e, ok := b.entries[key]
	if !ok {
		e = &entry{waiters: make(chan struct{})}
		b.entries[key] = e
	}
	return e
}

// TryAcquire implements lock.Backend.
func (b *Backend) TryAcquire(ctx context.Context, key, owner string, ttl time.Duration) (uint64, error) {
	if err := check(ctx, key, owner, ttl); err != nil {
		return 0, fmt.Errorf("locallock: acquire %q: %w", key, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e, now := b.entry(key), b.now()
	if e.owner != "" && e.owner != owner && now.Before(e.expiry) {
		return 0, fmt.Errorf("locallock: acquire %q: %w", key, lock.ErrNotAcquired)
	}
	e.owner, e.expiry = owner, now.Add(ttl)
	e.token++
	return e.token, nil
}

// Refresh implements lock.Backend.
func (b *Backend) Refresh(ctx context.Context, key, owner string, token uint64, ttl time.Duration) error {
	if err := check(ctx, key, owner, ttl); err != nil {
		return fmt.Errorf("locallock: refresh %q: %w", key, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e, now := b.entries[key], b.now()
	if e == nil || !e.holds(owner, token, now) {
		return fmt.Errorf("locallock: refresh %q token %d: %w", key, token, lock.ErrNotHeld)
	}
	e.expiry = now.Add(ttl)
	return nil
}

// Release implements lock.Backend.
func (b *Backend) Release(ctx context.Context, key, owner string, token uint64) error {
	if err := check(ctx, key, owner, lock.NoTTL); err != nil {
		return fmt.Errorf("locallock: release %q: %w", key, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.entries[key]
	if e == nil || !e.holds(owner, token, b.now()) {
		return fmt.Errorf("locallock: release %q token %d: %w", key, token, lock.ErrNotHeld)
	}
	e.release()
	return nil
}

// ReleaseOwner implements lock.OwnerReleaser: it frees key if owner holds
// an unexpired lease on it, whatever the token, and wakes watchers as
// Release does. Otherwise it changes nothing.
func (b *Backend) ReleaseOwner(ctx context.Context, key, owner string) error {
	if err := check(ctx, key, owner, lock.NoTTL); err != nil {
		return fmt.Errorf("locallock: release %q by owner: %w", key, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.entries[key]
	if e == nil || !e.holds(owner, e.token, b.now()) {
		return nil
	}
	e.release()
	return nil
}

// Watch implements lock.Notifier: the channel fires at the next release.
func (b *Backend) Watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	out := make(chan struct{}, 1)
	stop := make(chan struct{})
	var once sync.Once
	go func() {
		for {
			b.mu.Lock()
			w := b.entry(key).waiters
			b.mu.Unlock()
			select {
			case <-w:
				select {
				case out <- struct{}{}:
				default:
				}
			case <-stop:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, func() { once.Do(func() { close(stop) }) }
}

// check refuses what every backend refuses (lock.CheckArgs), and a call
// whose context has ended: the table answers at once, so that is the only
// way a call here can honour its context.
func check(ctx context.Context, key, owner string, ttl time.Duration) error {
	if err := lock.CheckArgs(key, owner, ttl); err != nil {
		return err
	}
	return ctx.Err()
}

// release frees the key and wakes its watchers. The caller holds b.mu.
func (e *entry) release() {
	e.owner, e.expiry = "", time.Time{}
	close(e.waiters)
	e.waiters = make(chan struct{})
}

func (e *entry) holds(owner string, token uint64, now time.Time) bool {
	return e.owner == owner && e.token == token && now.Before(e.expiry)
}
