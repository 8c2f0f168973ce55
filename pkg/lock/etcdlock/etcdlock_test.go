package etcdlock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/etcdlock"
	"github.com/stocklock/stocklock/pkg/lock/locktest"
)

// randHex returns n random bytes in hex, to keep the keys of tests that
// share an external etcd (ETCD_ENDPOINTS) apart.
func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func testPrefix() string { return "stocklock-test/" + randHex(4) + "/" }

func newBackend(t testing.TB, c *clientv3.Client, opts ...etcdlock.Option) *etcdlock.Backend {
	t.Helper()
	b, err := etcdlock.New(c, opts...)
	if err != nil {
		t.Fatalf("etcdlock.New: %v", err)
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
	srv := devstoretest.Etcd(t)
	t.Logf("etcd: %s at %v", srv.Kind, srv.Endpoints)
	prefix := testPrefix()
	locktest.Run(t, locktest.Harness{
		Backend: func(t *testing.T) lock.Backend {
			// Each call is a separate "process": its own client, spare
			// leases and watches.
			return newBackend(t, devstoretest.EtcdClient(t, srv), etcdlock.WithKeyPrefix(prefix))
		},
		TTL: time.Second,
	})
}

func TestNewRejectsBadArguments(t *testing.T) {
	if _, err := etcdlock.New(nil); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("New(nil) = %v, want ErrInvalidArgument", err)
	}
	if _, err := etcdlock.NewLocker(nil); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("NewLocker(nil) = %v, want ErrInvalidArgument", err)
	}
}

// TestTTLWholeSeconds: etcd leases are whole seconds, so a TTL under one
// second or with a fraction is rejected before any request.
func TestTTLWholeSeconds(t *testing.T) {
	srv := devstoretest.Etcd(t)
	c := devstoretest.EtcdClient(t, srv)
	b := newBackend(t, c, etcdlock.WithKeyPrefix(testPrefix()))
	if got := b.MinTTL(); got != time.Second {
		t.Errorf("MinTTL = %v, want 1s", got)
	}
	if _, err := lock.New(b, lock.WithTTL(500*time.Millisecond)); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("lock.New with a 500ms TTL = %v, want ErrInvalidArgument", err)
	}
	ctx := ctxFor(t, time.Minute)
	k := "ttl-" + randHex(4)
	for _, ttl := range []time.Duration{0, 999 * time.Millisecond, 1500 * time.Millisecond, 2*time.Second + time.Nanosecond} {
		if _, err := b.TryAcquire(ctx, k, "me", ttl); !errors.Is(err, lock.ErrBadTTL) {
			t.Errorf("TryAcquire with TTL %v = %v, want ErrBadTTL", ttl, err)
		}
	}
	l, err := lock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, k, lock.WithTTL(1500*time.Millisecond)); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("Acquire with TTL 1.5s = %v, want ErrInvalidArgument", err)
	}
	if r, err := c.Get(ctx, b.Key(k)); err != nil || len(r.Kvs) != 0 {
		t.Errorf("after rejected TTLs the key is %v (err %v), want absent", r.Kvs, err)
	}
	// A whole second is fine.
	lease, err := l.Acquire(ctx, k, lock.WithTTL(time.Second))
	if err != nil {
		t.Fatalf("Acquire with TTL 1s: %v", err)
	}
	_ = lease.Release(ctx)
}

// TestTokenIsRevision: a fresh grant's token is the lock key's create
// revision; a same-owner re-grant's is its new mod revision.
func TestTokenIsRevision(t *testing.T) {
	srv := devstoretest.Etcd(t)
	c := devstoretest.EtcdClient(t, srv)
	b := newBackend(t, c, etcdlock.WithKeyPrefix(testPrefix()))
	ctx := ctxFor(t, time.Minute)
	k := "token-" + randHex(4)
	kv := func() (create, mod, lease int64) {
		t.Helper()
		r, err := c.Get(ctx, b.Key(k))
		if err != nil || len(r.Kvs) != 1 {
			t.Fatalf("get lock key: %v %v", r, err)
		}
		return r.Kvs[0].CreateRevision, r.Kvs[0].ModRevision, r.Kvs[0].Lease
	}

	var last uint64
	for i := range 3 {
		tok, err := b.TryAcquire(ctx, k, "a", time.Second*10)
		if err != nil {
			t.Fatal(err)
		}
		create, _, _ := kv()
		if tok != uint64(create) {
			t.Errorf("grant %d: token %d, create revision %d", i, tok, create)
		}
		if tok <= last {
			t.Errorf("grant %d: token %d not above %d", i, tok, last)
		}
		last = tok
		if i == 2 {
			break
		}
		if err := b.Release(ctx, k, "a", tok); err != nil {
			t.Fatal(err)
		}
		// Unrelated writes in between move the revision on.
		if _, err := c.Put(ctx, "unrelated-"+randHex(2), "x"); err != nil {
			t.Fatal(err)
		}
	}
	_, _, oldLease := kv()
	again, err := b.TryAcquire(ctx, k, "a", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	create, mod, newLease := kv()
	if again <= last || again != uint64(mod) || create != int64(last) {
		t.Errorf("same-owner re-grant: token %d, create %d, mod %d, previous token %d", again, create, mod, last)
	}
	if newLease == oldLease {
		t.Errorf("re-grant kept lease %x", oldLease)
	}
	if ttl, err := c.TimeToLive(ctx, clientv3.LeaseID(oldLease)); err == nil && ttl.TTL > 0 {
		t.Errorf("superseded lease %x still alive (TTL %d)", oldLease, ttl.TTL)
	}
	if err := b.Release(ctx, k, "a", last); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("release with the superseded token = %v, want ErrNotHeld", err)
	}
	if err := b.Release(ctx, k, "a", again); err != nil {
		t.Fatal(err)
	}
}

// TestSpareLeases: a released lock's lease is kept and used by the next
// grant, renewed rather than granted again.
func TestSpareLeases(t *testing.T) {
	srv := devstoretest.Etcd(t)
	c := devstoretest.EtcdClient(t, srv)
	b := newBackend(t, c, etcdlock.WithKeyPrefix(testPrefix()))
	ctx := ctxFor(t, time.Minute)
	k := "spare-" + randHex(4)
	leaseOf := func() int64 {
		r, err := c.Get(ctx, b.Key(k))
		if err != nil || len(r.Kvs) != 1 {
			t.Fatalf("get lock key: %v %v", r, err)
		}
		return r.Kvs[0].Lease
	}
	tok, err := b.TryAcquire(ctx, k, "a", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	first := leaseOf()
	if err := b.Release(ctx, k, "a", tok); err != nil {
		t.Fatal(err)
	}
	tok, err = b.TryAcquire(ctx, k, "b", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := leaseOf(); got != first {
		t.Errorf("second grant on lease %x, want the spare %x", got, first)
	}
	// A refused attempt keeps its lease as a spare too, and it is renewed
	// to the full TTL when used.
	if _, err := b.TryAcquire(ctx, k, "c", 3*time.Second); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire on a held key = %v", err)
	}
	_ = b.Release(ctx, k, "b", tok)

	// A spare that expired (here: revoked behind the backend's back) is
	// replaced by a new lease.
	if _, err := c.Revoke(ctx, clientv3.LeaseID(first)); err != nil {
		t.Fatal(err)
	}
	tok, err = b.TryAcquire(ctx, k, "e", 3*time.Second)
	if err != nil {
		t.Fatalf("TryAcquire with a dead spare: %v", err)
	}
	if got := leaseOf(); got == first {
		t.Errorf("granted on the revoked lease %x", got)
	}
	_ = b.Release(ctx, k, "e", tok)

	// A spare of another TTL is not used.
	tok, err = b.TryAcquire(ctx, k, "d", 4*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ttl, err := c.TimeToLive(ctx, clientv3.LeaseID(leaseOf()))
	if err != nil || ttl.GrantedTTL != 4 {
		t.Errorf("lease for a 4s grant: %+v %v", ttl, err)
	}
	_ = b.Release(ctx, k, "d", tok)

	// Close revokes the spares.
	r, err := c.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	for _, l := range r.Leases {
		if ttl, err := c.TimeToLive(ctx, l.ID); err == nil && ttl.TTL > 0 && srv.Kind != devstore.KindExternal {
			t.Errorf("lease %x alive after Close (TTL %d)", l.ID, ttl.TTL)
		}
	}
}

// TestWaiterWokenByWatch: a waiter whose backoff is an hour still takes the
// key at once when the holder releases it, or when the holder's lease
// expires: the watch on the key's deletion wakes it.
func TestWaiterWokenByWatch(t *testing.T) {
	srv := devstoretest.Etcd(t)
	prefix := testPrefix()
	holderL, err := lock.New(newBackend(t, devstoretest.EtcdClient(t, srv), etcdlock.WithKeyPrefix(prefix)))
	if err != nil {
		t.Fatal(err)
	}
	hour := lock.RetryPolicy{Min: time.Hour, Max: time.Hour}
	waiterL, err := lock.New(newBackend(t, devstoretest.EtcdClient(t, srv), etcdlock.WithKeyPrefix(prefix)), lock.WithRetry(hour))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, time.Minute)

	for _, how := range []string{"release", "expiry"} {
		t.Run(how, func(t *testing.T) {
			k := "woken-" + randHex(4)
			opts := []lock.Option{lock.WithTTL(time.Second)}
			if how == "expiry" {
				opts = append(opts, lock.WithRenewal(0))
			}
			holder, err := holderL.Acquire(ctx, k, opts...)
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				lease *lock.Lease
				err   error
				at    time.Time
			}
			got := make(chan result, 1)
			go func() {
				l, err := waiterL.Acquire(ctx, k)
				got <- result{l, err, time.Now()}
			}()
			time.Sleep(300 * time.Millisecond) // the waiter's first attempt fails; it sleeps
			var freed time.Time
			if how == "release" {
				freed = time.Now()
				if err := holder.Release(ctx); err != nil {
					t.Fatal(err)
				}
			} else {
				<-holder.Done() // local expiry: the server's comes a moment later
				freed = time.Now()
			}
			select {
			case r := <-got:
				if r.err != nil {
					t.Fatal(r.err)
				}
				t.Logf("waiter took the key %v after the %s", r.at.Sub(freed), how)
				_ = r.lease.Release(ctx)
			case <-time.After(5 * time.Second):
				t.Fatalf("waiter still waiting 5s after the %s", how)
			}
		})
	}
}

// TestRefusalWhileWatching: a backend that watches a key (it has waiters on
// it) and saw it granted to another owner refuses with a read, not a
// transaction: the store's revision does not move.
func TestRefusalWhileWatching(t *testing.T) {
	srv := devstoretest.Etcd(t)
	c := devstoretest.EtcdClient(t, srv)
	prefix := testPrefix()
	holder := newBackend(t, c, etcdlock.WithKeyPrefix(prefix))
	waiter := newBackend(t, devstoretest.EtcdClient(t, srv), etcdlock.WithKeyPrefix(prefix))
	ctx := ctxFor(t, time.Minute)
	k := "refusal-" + randHex(4)

	_, stop := waiter.Watch(ctx, k)
	defer stop()
	tok, err := holder.TryAcquire(ctx, k, "holder", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rev := func() int64 {
		r, err := c.Get(ctx, "any")
		if err != nil {
			t.Fatal(err)
		}
		return r.Header.Revision
	}
	// Wait until the waiter's watch has seen the grant: then its
	// refusals stop moving the revision.
	deadline := time.Now().Add(10 * time.Second)
	for {
		before := rev()
		if _, err := waiter.TryAcquire(ctx, k, "waiter", 10*time.Second); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("TryAcquire on a held key = %v", err)
		}
		if rev() == before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("every refused attempt was a write")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := holder.Release(ctx, k, "holder", tok); err != nil {
		t.Fatal(err)
	}
	// After the release the hint says free, and the next attempt wins.
	deadline = time.Now().Add(10 * time.Second)
	for {
		tok, err = waiter.TryAcquire(ctx, k, "waiter", 10*time.Second)
		if err == nil {
			break
		}
		if !errors.Is(err, lock.ErrNotAcquired) || time.Now().After(deadline) {
			t.Fatalf("TryAcquire after the release: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = waiter.Release(ctx, k, "waiter", tok)
}
