package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/internal/keys"
)

// DefaultKeyPrefix is the prefix of every key the backend writes: a lock on
// key k is the etcd key prefix+"k/"+k.
const DefaultKeyPrefix = "stocklock/lock/"

// KeyPrefix returns the prefix for the keys of a namespace (a database, an
// application) sharing an etcd with others: DefaultKeyPrefix, namespace
// and a slash, or DefaultKeyPrefix alone for "". redislock and redlock
// follow the same rule, each from its own default prefix.
func KeyPrefix(namespace string) string { return keys.Prefix(DefaultKeyPrefix, namespace) }

// KeyName returns the etcd key that holds the lock on key for a backend
// whose prefix is prefix: prefix + "k/" + key.
func KeyName(prefix, key string) string { return prefix + "k/" + key }

// MinTTL is the shortest lease etcd grants: TTLs are whole seconds.
const MinTTL = time.Second

// DefaultRetry is the retry policy NewLocker gives its Locker. Waiters are
// woken by a watch on the key's deletion (its release or expiry), so the
// backoff only paces the retries when a wake-up is lost or a woken waiter
// lost the race: up to a second, rather than lock.DefaultRetry's 100 ms,
// since a refused attempt may be a Raft write.
var DefaultRetry = lock.RetryPolicy{Min: 10 * time.Millisecond, Max: time.Second}

// Option configures a Backend.
type Option func(*config)

type config struct {
	prefix string
}

// WithKeyPrefix sets the prefix of the keys written, to keep applications
// (or test runs) apart on one etcd. Default: DefaultKeyPrefix.
func WithKeyPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// Backend is a lock.Backend, lock.Notifier, lock.TTLFloor and
// lock.OwnerReleaser on etcd. It is safe for concurrent use. Close it to
// stop its watches and give back its spare leases.
//
// A lock is one key, prefix+"k/"+key, whose value is the owner and which is
// attached to an etcd lease with the lock's TTL: when the lease expires or
// is revoked, etcd deletes the key, and the lock is free. Each call is one
// or two requests:
//
//   - TryAcquire: one transaction that puts the key if it does not exist,
//     or puts it again if its value is the same owner, and else changes
//     nothing; on a spare lease, renewed by one keep-alive if the attempt
//     won, or else on a lease granted first. When the backend is watching
//     the key (it has waiters on it) and last saw it granted to another
//     owner, a read comes first, and a refusal costs no write.
//   - Refresh: a read of the key, checking its mod revision (the token) and
//     owner, then one keep-alive of the key's lease.
//   - Release: one transaction that deletes the key if its mod revision and
//     value are still the lease's.
//   - ReleaseOwner: one transaction that deletes the key if its value is
//     the owner.
//
// Leases are not revoked after a release or a refused attempt but kept as
// spares for the next TryAcquire with the same TTL: a grant is a Raft write
// (a disk sync on a quorum of members), a keep-alive is answered by the
// leader alone, and a refused attempt needs neither.
type Backend struct {
	client *clientv3.Client
	prefix string

	leases leasePool
	notify notifier
}

// New returns a backend over client. It does not close the client.
func New(client *clientv3.Client, opts ...Option) (*Backend, error) {
	if client == nil {
		return nil, fmt.Errorf("etcdlock: %w: nil client", lock.ErrBadConfig)
	}
	c := config{prefix: DefaultKeyPrefix}
	for _, opt := range opts {
		opt(&c)
	}
	b := &Backend{client: client, prefix: KeyName(c.prefix, "")}
	b.leases.init(client)
	b.notify.init(client)
	return b, nil
}

// NewLocker returns a lock.Locker over a new Backend with default options,
// retrying with DefaultRetry unless lockOpts say otherwise. The backend's
// watches end when client is closed.
func NewLocker(client *clientv3.Client, lockOpts ...lock.Option) (*lock.Locker, error) {
	b, err := New(client)
	if err != nil {
		return nil, err
	}
	return lock.New(b, append([]lock.Option{lock.WithRetry(DefaultRetry)}, lockOpts...)...)
}

// Close stops the backend's watches and revokes its spare leases (those of
// held locks are left alone: the locks stay held until released or
// expired). The backend still takes, refreshes and releases locks after
// Close, but Watch no longer reports releases. Close does not close the
// client.
func (b *Backend) Close() error {
	b.notify.close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	b.leases.close(ctx)
	return nil
}

// MinTTL implements lock.TTLFloor: etcd lease TTLs are whole seconds.
func (b *Backend) MinTTL() time.Duration { return MinTTL }

// Key returns the etcd key that holds the lock on key (KeyName with the
// backend's prefix).
func (b *Backend) Key(key string) string { return b.prefix + key }

// CheckTTL returns an error wrapping lock.ErrBadTTL unless ttl is a whole
// number of seconds, at least one: the only TTLs an etcd lease can have.
func CheckTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl%time.Second != 0 {
		return fmt.Errorf("%w: %v is not a whole number of seconds, at least 1s (etcd leases are)", lock.ErrBadTTL, ttl)
	}
	return nil
}

// checkArgs is lock.CheckArgs, then CheckTTL unless ttl is lock.NoTTL.
func checkArgs(key, owner string, ttl time.Duration) error {
	if err := lock.CheckArgs(key, owner, ttl); err != nil {
		return err
	}
	if ttl != lock.NoTTL {
		return CheckTTL(ttl)
	}
	return nil
}

// TryAcquire implements lock.Backend. The token is the revision of the Put
// that granted the lease.
func (b *Backend) TryAcquire(ctx context.Context, key, owner string, ttl time.Duration) (uint64, error) {
	if err := checkArgs(key, owner, ttl); err != nil {
		return 0, fmt.Errorf("etcdlock: acquire %q: %w", key, err)
	}
	k := b.Key(key)
	if b.notify.heldByOther(k, owner) {
		// The watch says another owner holds the key: make sure with a
		// read, which costs the server far less than a refused
		// transaction (a Raft write like any other).
		if r, err := b.client.Get(ctx, k); err == nil && len(r.Kvs) == 1 && string(r.Kvs[0].Value) != owner {
			return 0, fmt.Errorf("etcdlock: acquire %q: %w", key, lock.ErrNotAcquired)
		}
	}
	start := time.Now()
	secs := int64(ttl / time.Second)
	l, err := b.leases.get(ctx, secs, start)
	if err != nil {
		return 0, fmt.Errorf("etcdlock: acquire %q: lease: %w", key, err)
	}
	resp, err := b.grant(ctx, k, owner, l.id)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) && l.spare {
		// The spare expired after all: try once more on a new lease.
		b.leases.forget(l.id)
		if l, err = b.leases.grant(ctx, secs, start); err != nil {
			return 0, fmt.Errorf("etcdlock: acquire %q: lease: %w", key, err)
		}
		resp, err = b.grant(ctx, k, owner, l.id)
	}
	if err != nil {
		// The outcome is unknown: the lease may hold the key now, so it
		// is not a spare. The Locker's retry re-grants the key to the
		// same owner, which revokes it; its clean-up deletes the key
		// (ReleaseOwner), and the lease expires holding nothing.
		b.leases.forget(l.id)
		return 0, fmt.Errorf("etcdlock: acquire %q: %w", key, err)
	}

	token := uint64(resp.Header.Revision)
	switch inner := resp.Responses[0].GetResponseTxn(); {
	case resp.Succeeded:
	case inner != nil && inner.Succeeded:
		// Same owner: the key now rides on the new lease. The old one
		// holds nothing; revoke it rather than keep it as a spare, since
		// the superseded holder may still try to renew it.
		if prev := inner.Responses[0].GetResponsePut().GetPrevKv(); prev != nil && prev.Lease != 0 && prev.Lease != int64(l.id) {
			b.leases.revoke(ctx, clientv3.LeaseID(prev.Lease))
		}
	default:
		b.leases.put(l)
		return 0, fmt.Errorf("etcdlock: acquire %q: %w", key, lock.ErrNotAcquired)
	}

	if l.spare {
		// A spare was renewed last before this call; the holder counts its
		// expiry from the call's start, so the server must too. Renewing
		// only now, after winning, spares the refused attempts (most of
		// them, under contention) a round trip.
		ka, err := b.client.KeepAliveOnce(ctx, l.id)
		if err != nil || ka.TTL < secs {
			// The key is ours but may lapse before the holder thinks:
			// report the outcome as unknown. A retry by the same owner
			// re-grants it on a fresh lease.
			b.leases.forget(l.id)
			if err == nil {
				err = fmt.Errorf("lease renewed for %ds only", ka.TTL)
			}
			return 0, fmt.Errorf("etcdlock: acquire %q: renew spare lease: %w", key, err)
		}
		b.leases.renewed(l.id, start)
	}
	return token, nil
}

// grant puts k for owner on lease id if k does not exist or is owner's, in
// one transaction.
func (b *Backend) grant(ctx context.Context, k, owner string, id clientv3.LeaseID) (*clientv3.TxnResponse, error) {
	return b.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, owner, clientv3.WithLease(id))).
		Else(clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(k), "=", owner)},
			[]clientv3.Op{clientv3.OpPut(k, owner, clientv3.WithLease(id), clientv3.WithPrevKV())},
			nil,
		)).
		Commit()
}

// Refresh implements lock.Backend. It renews the etcd lease the key is
// attached to, which resets it to the TTL it was granted with (etcd cannot
// change a lease's TTL): ttl must not be longer than that.
func (b *Backend) Refresh(ctx context.Context, key, owner string, token uint64, ttl time.Duration) error {
	if err := checkArgs(key, owner, ttl); err != nil {
		return fmt.Errorf("etcdlock: refresh %q: %w", key, err)
	}
	start := time.Now()
	k := b.Key(key)
	resp, err := b.client.Get(ctx, k)
	if err != nil {
		return fmt.Errorf("etcdlock: refresh %q: %w", key, err)
	}
	if len(resp.Kvs) == 0 || uint64(resp.Kvs[0].ModRevision) != token || string(resp.Kvs[0].Value) != owner || resp.Kvs[0].Lease == 0 {
		return fmt.Errorf("etcdlock: refresh %q token %d: %w", key, token, lock.ErrNotHeld)
	}
	id := clientv3.LeaseID(resp.Kvs[0].Lease)
	ka, err := b.client.KeepAliveOnce(ctx, id)
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		// Expired between the read and the keep-alive: etcd has deleted
		// the key with it.
		return fmt.Errorf("etcdlock: refresh %q token %d: lease expired: %w", key, token, lock.ErrNotHeld)
	case err != nil:
		return fmt.Errorf("etcdlock: refresh %q: %w", key, err)
	case time.Duration(ka.TTL)*time.Second < ttl:
		return fmt.Errorf("etcdlock: refresh %q: %w: %v is longer than the %ds the lease was granted for",
			key, lock.ErrBadTTL, ttl, ka.TTL)
	}
	b.leases.renewed(id, start)
	return nil
}

// Release implements lock.Backend. The key's deletion wakes the waiters of
// every backend through their watches.
func (b *Backend) Release(ctx context.Context, key, owner string, token uint64) error {
	if err := checkArgs(key, owner, lock.NoTTL); err != nil {
		return fmt.Errorf("etcdlock: release %q: %w", key, err)
	}
	k := b.Key(key)
	deleted, err := b.deleteIf(ctx, k,
		clientv3.Compare(clientv3.ModRevision(k), "=", int64(token)),
		clientv3.Compare(clientv3.Value(k), "=", owner))
	switch {
	case err != nil:
		return fmt.Errorf("etcdlock: release %q: %w", key, err)
	case !deleted:
		return fmt.Errorf("etcdlock: release %q token %d: %w", key, token, lock.ErrNotHeld)
	}
	return nil
}

// ReleaseOwner implements lock.OwnerReleaser: one transaction that deletes
// the key if its value is owner, whatever its mod revision. The deletion
// wakes waiters as Release's does. When the key is free or another owner's
// it changes nothing.
func (b *Backend) ReleaseOwner(ctx context.Context, key, owner string) error {
	if err := checkArgs(key, owner, lock.NoTTL); err != nil {
		return fmt.Errorf("etcdlock: release %q by owner: %w", key, err)
	}
	k := b.Key(key)
	if _, err := b.deleteIf(ctx, k, clientv3.Compare(clientv3.Value(k), "=", owner)); err != nil {
		return fmt.Errorf("etcdlock: release %q by owner: %w", key, err)
	}
	return nil
}

// deleteIf deletes k in one transaction if every cmp holds, and keeps the
// lease the key rode on as a spare. It reports whether it deleted k. The
// deletion wakes the waiters of every backend through their watches.
func (b *Backend) deleteIf(ctx context.Context, k string, cmps ...clientv3.Cmp) (bool, error) {
	resp, err := b.client.Txn(ctx).If(cmps...).Then(clientv3.OpDelete(k, clientv3.WithPrevKV())).Commit()
	if err != nil || !resp.Succeeded {
		return false, err
	}
	if prev := resp.Responses[0].GetResponseDeleteRange().GetPrevKvs(); len(prev) == 1 && prev[0].Lease != 0 {
		b.leases.released(clientv3.LeaseID(prev[0].Lease))
	}
	return true, nil
}

// Watch implements lock.Notifier. A backend keeps one etcd watch per key
// that has local waiters (and for a few seconds after the last one leaves),
// and each deletion of the key, by a release or a lease expiry, wakes the
// longest-waiting local waiter. Watch waits, at most a second, until the
// watch is in place on the server, so that a release right after the
// caller's next attempt is not missed.
func (b *Backend) Watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	return b.notify.watch(ctx, b.Key(key))
}

var (
	_ lock.Backend       = (*Backend)(nil)
	_ lock.Notifier      = (*Backend)(nil)
	_ lock.TTLFloor      = (*Backend)(nil)
	_ lock.OwnerReleaser = (*Backend)(nil)
)

// leasePool keeps the leases a backend granted and no longer uses, so that
// the next TryAcquire puts its key on one instead of granting a new one: a
// grant is a Raft write (a disk sync on a quorum), a renewal is answered by
// the leader alone, and a refused attempt needs neither.
type leasePool struct {
	client *clientv3.Client

	mu     sync.Mutex
	spares map[int64][]leaseRef          // by TTL in seconds, most recent last
	known  map[clientv3.LeaseID]leaseRef // leases granted here and not forgotten
	closed bool
}

// leaseRef is a lease and what the backend knows of it.
type leaseRef struct {
	id      clientv3.LeaseID
	secs    int64     // granted TTL
	renewed time.Time // before the last grant or renewal request was sent
	spare   bool      // taken from the spares (else granted for this call)
}

// Bounds of the pool. Leases beyond them are forgotten, and etcd expires
// them after their TTL.
const (
	maxSpares = 16
	maxKnown  = 4096
)

func (p *leasePool) init(client *clientv3.Client) {
	p.client = client
	p.spares = make(map[int64][]leaseRef)
	p.known = make(map[clientv3.LeaseID]leaseRef)
}

// get returns a spare lease of secs seconds that has at least half of its
// TTL left (not renewed: the caller renews it if it wins), or else a new
// one granted at or after start.
func (p *leasePool) get(ctx context.Context, secs int64, start time.Time) (leaseRef, error) {
	p.mu.Lock()
	for ss := p.spares[secs]; len(ss) > 0; ss = p.spares[secs] {
		l := ss[len(ss)-1]
		p.spares[secs] = ss[:len(ss)-1]
		if time.Until(l.renewed.Add(time.Duration(secs)*time.Second/2)) > 0 {
			p.mu.Unlock()
			l.spare = true
			return l, nil
		}
		delete(p.known, l.id)
	}
	p.mu.Unlock()
	return p.grant(ctx, secs, start)
}

func (p *leasePool) grant(ctx context.Context, secs int64, start time.Time) (leaseRef, error) {
	g, err := p.client.Grant(ctx, secs)
	if err != nil {
		return leaseRef{}, err
	}
	l := leaseRef{id: g.ID, secs: secs, renewed: start}
	p.mu.Lock()
	if len(p.known) >= maxKnown {
		for id := range p.known { // forget one at random
			delete(p.known, id)
			break
		}
	}
	p.known[l.id] = l
	p.mu.Unlock()
	return l, nil
}

// put keeps l, which holds no key, as a spare.
func (p *leasePool) put(l leaseRef) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.spares[l.secs]) >= maxSpares {
		delete(p.known, l.id)
		return
	}
	l.spare = false
	p.known[l.id] = l
	p.spares[l.secs] = append(p.spares[l.secs], l)
}

// renewed records a successful renewal of id sent at start.
func (p *leasePool) renewed(id clientv3.LeaseID, start time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l, ok := p.known[id]; ok && start.After(l.renewed) {
		l.renewed = start
		p.known[id] = l
	}
}

// released keeps the lease of a released lock as a spare, if it was granted
// here (only then are its TTL and last renewal known without asking).
func (p *leasePool) released(id clientv3.LeaseID) {
	p.mu.Lock()
	l, ok := p.known[id]
	p.mu.Unlock()
	if ok {
		p.put(l)
	}
}

func (p *leasePool) forget(id clientv3.LeaseID) {
	p.mu.Lock()
	delete(p.known, id)
	p.mu.Unlock()
}

func (p *leasePool) revoke(ctx context.Context, id clientv3.LeaseID) {
	p.forget(id)
	_, _ = p.client.Revoke(ctx, id) // best effort: it expires anyway
}

func (p *leasePool) close(ctx context.Context) {
	p.mu.Lock()
	p.closed = true
	var ids []clientv3.LeaseID
	for _, ss := range p.spares {
		for _, l := range ss {
			ids = append(ids, l.id)
		}
	}
	p.spares = map[int64][]leaseRef{}
	p.mu.Unlock()
	for _, id := range ids {
		p.revoke(ctx, id)
	}
}
