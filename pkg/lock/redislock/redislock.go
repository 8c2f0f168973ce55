// Package redislock is a lock.Backend on a single Redis primary (or a Redis
// Cluster): SET NX PX in a Lua script, with a fencing token drawn from a
// per-key counter, a queue of waiters on the server to which a release
// hands the key, and release notifications over pub/sub for callers that
// do not queue.
//
// # Keys
//
// For a lock key k and the default prefix, Redis holds
//
//	stocklock:lock:{k}          "<token>:<owner>", with a PX expiry: the lease
//	stocklock:lock:{k}:fence    the last grant of k (token, waiter, owner),
//	                            never expired
//	stocklock:lock:{k}:queue    the waiters queued for k, oldest first
//	stocklock:lock:{k}:waiters  the backends refused k in the last minute
//	                            without queueing (TryAcquire)
//
// The braces are a Redis Cluster hash tag: the keys of one lock hash to the
// same slot, which a script touching several requires. (A key that begins
// with "}" empties the tag; on a Cluster its keys then land in different
// slots and every call fails with CROSSSLOT.) lib.lua describes each key's
// layout.
//
// The fence key outlives the lease on purpose: if it expired with the lease,
// the next grant would start counting again and hand out a token some paused
// holder may already have used. It is one small key per lock name ever used;
// keep Redis off allkeys-* eviction policies, or accept that an evicted
// counter is rebuilt from the clock (see below).
//
// # Tokens
//
// A token is max(last token, server time in microseconds) + 1. The clock
// term keeps tokens increasing when the counter itself is lost: a restart
// without persistence, a restore from an older snapshot, a failover to a
// replica that had not seen the last grants. What it needs is a server
// clock that does not step backwards across such an event. Grants handed
// over from a release to a waiter draw their tokens the same way.
//
// # Handoff
//
// Backend implements lock.Handoff, so a blocking lock.Locker.Acquire waits in
// a queue on the server. An attempt that finds the key held appends the
// waiter to the key's queue (wait.lua). A release (release.lua) that finds a
// waiter queued grants the key to the first one, with a new token and that
// waiter's TTL, in the same script, and publishes the grant on the waiter's
// backend's own channel, stocklock:lock:granted:<backend id>: one message,
// to one process, and no waiter races another. When the waiter belongs to
// the releasing backend, nothing is published and the release's reply
// carries the grant.
//
// A release checks its lease through the fence, which it swaps for the new
// grant in the same call (SET ... GET), and a waiter's first attempt on a
// key its backend saw contended a moment ago joins the queue before
// reading anything: a contended lock cycle costs the server 5 calls, 6
// across processes (lib.lua).
//
// A queued waiter's place lapses unless it attempts again within the stay
// the Locker gives (about twice its next backoff, at most half its TTL).
// Releases pass over lapsed places, so a waiter whose process died is not
// handed the key once its place lapses; one handed the key just before it
// died holds it until its TTL, as a crashed holder would. Messages can be
// lost (a reconnecting subscription): the waiter's next attempt on its
// backoff claims a grant handed to it (the fence records the waiter with
// the token). A waiter that gives up leaves the queue and frees a grant it
// has not taken (leave.lua).
//
// # Notifications
//
// Each Backend holds one subscription, on a dedicated connection, opened at
// the first Waiter or Watch: to its grant channel and, from the first Watch
// on, to the release channels of every key under its prefix (give
// unrelated applications their own prefix). A release that hands the key to
// no queued waiter publishes on
// stocklock:lock:released:k, but only if a backend other than the releasing
// one was refused k lately without queueing; Watch reports those releases,
// waking one watcher per backend, the one waiting longest (a watcher in the
// releasing backend itself is woken just before the release is sent, so
// that its attempt reaches Redis right behind it). Notifications only
// shorten waits: callers still retry on their backoff when one is lost, or
// when a lease expires instead of being released.
//
// # Redis Cluster
//
// Over a *redis.ClusterClient every script runs on the master of its lock
// key's slot (the hash tag keeps all of a lock's keys there), and the
// notifications stay on classic pub/sub: a cluster forwards every PUBLISH
// to every node, so the backend's one subscription, on whichever node
// serves its grant channel's slot, hears grants and releases published by
// the scripts on every master. Sharded pub/sub (SPUBLISH) would keep a
// message on its shard, but a script may publish only to shard channels its
// own node serves, which would need a channel per lock key and a
// subscription per key and node for every waiting process; see
// docs/redis-lock.md. A message lost while the subscription moves to
// another node (its node failed) delays waiters to their next attempt, as
// any lost message does.
//
// # What Redis does not give you
//
// Replication is asynchronous: a primary that fails right after a grant can
// be replaced by a replica that never saw it, and a second owner can be
// granted the key while the first still holds its lease. The token still
// increases (by the clock), so a fenced write rejects the older holder; the
// lock alone does not.
package redislock

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/internal/keys"
)

// Client is the part of a go-redis client the backend uses: scripts for the
// lock itself, and PSubscribe for the PubSub that receives grants (a
// channel subscription) and release notifications (a pattern). *redis.Client, *redis.ClusterClient and
// redis.UniversalClient satisfy it. (*redis.Ring does too, but subscribes on
// one shard only: grants and releases of keys on the other shards go
// unheard, and waiters fall back to their backoff.)
type Client interface {
	redis.Scripter
	PSubscribe(ctx context.Context, patterns ...string) *redis.PubSub
}

// DefaultKeyPrefix is the prefix of every key and channel the backend uses.
const DefaultKeyPrefix = "stocklock:lock:"

// KeyPrefix returns the prefix for the keys of a namespace (a database, an
// application) sharing a Redis with others: DefaultKeyPrefix, namespace and
// a slash, or DefaultKeyPrefix alone for "". redlock and etcdlock follow
// the same rule, each from its own default prefix.
func KeyPrefix(namespace string) string { return keys.Prefix(DefaultKeyPrefix, namespace) }

// KeyName returns the name of the Redis key that holds the lease on key
// for a backend whose prefix is prefix: prefix + "{" + key + "}". The
// lock's other keys add a suffix to it (see Keys in the package
// documentation), and its hash tag, key, decides the Cluster slot of all
// of them.
func KeyName(prefix, key string) string { return prefix + "{" + key + "}" }

// KeyPattern returns a KEYS or SCAN pattern that matches the lease key of
// key under DefaultKeyPrefix in any namespace (KeyPrefix), for tools that
// do not know the namespace.
func KeyPattern(key string) string { return DefaultKeyPrefix + "*{" + keys.GlobEscape(key) + "}" }

// DefaultFenceSuffix is appended to a lock key to name its fence counter.
const DefaultFenceSuffix = ":fence"

// Suffixes of a lock key that name its other keys (lib.lua describes them
// all). waitersTTL is how long after the last plain refusal the waiters set
// lives: a plain waiter retries (and so renews the expiry) at least every
// retry policy Max, 100 ms by default; one that sleeps longer than
// waitersTTL between attempts may miss a release and sleep out its backoff.
// Members are not removed when they stop waiting; a stale one costs a
// message nobody needs, until the set expires. queueTTL is how long the
// queue keys live after the last attempt that queued or kept a place.
const (
	waitersSuffix = ":waiters"
	queueSuffix   = ":queue"
	waitersTTL    = time.Minute
	queueTTL      = time.Minute
)

var (
	//go:embed lib.lua
	libSrc string

	//go:embed acquire.lua
	acquireSrc    string
	acquireScript = redis.NewScript(libSrc + acquireSrc)

	//go:embed wait.lua
	waitSrc    string
	waitScript = redis.NewScript(libSrc + waitSrc)

	//go:embed release.lua
	releaseSrc    string
	releaseScript = redis.NewScript(libSrc + releaseSrc)

	//go:embed releaseowner.lua
	releaseOwnerSrc    string
	releaseOwnerScript = redis.NewScript(libSrc + releaseOwnerSrc)

	//go:embed leave.lua
	leaveSrc    string
	leaveScript = redis.NewScript(libSrc + leaveSrc)

	//go:embed refresh.lua
	refreshSrc    string
	refreshScript = redis.NewScript(refreshSrc)
)

// Option configures a Backend.
type Option func(*config)

type config struct {
	prefix      string
	fenceSuffix string
}

// WithKeyPrefix sets the prefix of the backend's keys and channels, to keep
// several applications (or test runs) apart on one Redis. It must not
// contain braces, which would move the Cluster hash tag. Default:
// DefaultKeyPrefix.
func WithKeyPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// WithFenceSuffix sets what is appended to a lock key to name its fence
// counter. Default: DefaultFenceSuffix. It must be non-empty, without braces,
// and neither ":waiters" nor ":queue": the part after the last brace then
// tells a key's role, so no key of one lock can be a key of another.
func WithFenceSuffix(suffix string) Option { return func(c *config) { c.fenceSuffix = suffix } }

// Backend is a lock.Backend and lock.Notifier on Redis. It is safe for
// concurrent use. Close it to stop its subscription.
type Backend struct {
	id          string // names this backend in waiters sets
	client      Client
	prefix      string
	fenceSuffix string
	channelPfx  string // release channels are channelPfx + key
	grantPfx    string // a backend's grants come on grantPfx + its id

	// Script arguments that do not change, boxed once: a string converted
	// to an interface allocates.
	idArg, grantPfxArg, waitersTTLArg, queueTTLArg any

	last atomic.Pointer[lockNames] // the names of the last key used

	notify notifier
}

// lockNames are the names a lock key's scripts take, and the server's
// clock as the last attempt that read it reported.
type lockNames struct {
	key        string
	keys       []string // lock, fence, queue, waiters (lib.lua)
	channelArg any      // the key's release channel
	clock      atomic.Pointer[serverClock]
}

// New returns a backend over client.
func New(client Client, opts ...Option) (*Backend, error) {
	if client == nil {
		return nil, fmt.Errorf("redislock: %w: nil client", lock.ErrBadConfig)
	}
	c := config{prefix: DefaultKeyPrefix, fenceSuffix: DefaultFenceSuffix}
	for _, opt := range opts {
		opt(&c)
	}
	if strings.ContainsAny(c.prefix, "{}") {
		return nil, fmt.Errorf("redislock: %w: key prefix %q contains a brace", lock.ErrBadConfig, c.prefix)
	}
	switch c.fenceSuffix {
	case "", waitersSuffix, queueSuffix:
		return nil, fmt.Errorf("redislock: %w: fence suffix %q is empty or names another key of a lock", lock.ErrBadConfig, c.fenceSuffix)
	}
	if strings.ContainsAny(c.fenceSuffix, "{}") {
		return nil, fmt.Errorf("redislock: %w: fence suffix %q contains a brace", lock.ErrBadConfig, c.fenceSuffix)
	}
	var id [8]byte
	_, _ = rand.Read(id[:]) // crypto/rand.Read never fails on supported platforms.
	b := &Backend{
		id:          hex.EncodeToString(id[:]),
		client:      client,
		prefix:      c.prefix,
		fenceSuffix: c.fenceSuffix,
		channelPfx:  c.prefix + "released:",
		grantPfx:    c.prefix + "granted:",
	}
	b.idArg, b.grantPfxArg = b.id, b.grantPfx
	b.waitersTTLArg, b.queueTTLArg = ttlArg(waitersTTL), ttlArg(queueTTL)
	b.notify.init(client, b.channelPfx, b.grantPfx+b.id)
	return b, nil
}

// DefaultRetry is the retry policy for a Locker over this backend; NewLocker
// uses it unless told otherwise. A queued waiter is handed the key by the
// release, so its timer is only the fallback for a lost message or a lease
// that expired instead of being released (each attempt also renews its
// place in the queue). lock.DefaultRetry's 2 ms first step would send
// waiters to Redis long before their turn, to be refused in front of the
// holder's own commands.
var DefaultRetry = lock.RetryPolicy{Min: 20 * time.Millisecond, Max: 100 * time.Millisecond}

// NewLocker returns a lock.Locker over a new Backend with default options
// and DefaultRetry; lockOpts come after, so they may override it. The
// backend's subscription ends when client is closed.
func NewLocker(client Client, lockOpts ...lock.Option) (*lock.Locker, error) {
	b, err := New(client)
	if err != nil {
		return nil, err
	}
	return lock.New(b, append([]lock.Option{lock.WithRetry(DefaultRetry)}, lockOpts...)...)
}

// Close stops the subscription and waits for its goroutine to end.
// The backend still takes, refreshes and releases locks after Close, but
// Watch no longer reports releases. Close does not close the client.
func (b *Backend) Close() error {
	b.notify.close()
	return nil
}

// Key returns the name of the Redis key that holds the lease on key
// (KeyName with the backend's prefix).
func (b *Backend) Key(key string) string { return KeyName(b.prefix, key) }

// names returns the names of lock key's keys and release channel. The
// last key's are kept: a busy key is usually the same key.
func (b *Backend) names(key string) *lockNames {
	if n := b.last.Load(); n != nil && n.key == key {
		return n
	}
	lk := b.Key(key)
	n := &lockNames{
		key:        key,
		keys:       []string{lk, lk + b.fenceSuffix, lk + queueSuffix, lk + waitersSuffix},
		channelArg: b.channelPfx + key,
	}
	b.last.Store(n)
	return n
}

func (b *Backend) value(owner string, token uint64) string {
	v := make([]byte, 0, 21+len(owner))
	v = strconv.AppendUint(v, token, 10)
	v = append(v, ':')
	return string(append(v, owner...))
}

// ttlArg renders ttl in whole milliseconds, rounded up: the Locker counts a
// lease's expiry from before the request, so the server may keep it a little
// longer than the holder believes, never shorter.
func ttlArg(ttl time.Duration) string { return strconv.FormatInt(millis(ttl), 10) }

// millis is d in whole milliseconds, rounded up, as the scripts take it.
func millis(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// TryAcquire implements lock.Backend.
func (b *Backend) TryAcquire(ctx context.Context, key, owner string, ttl time.Duration) (uint64, error) {
	if err := lock.CheckArgs(key, owner, ttl); err != nil {
		return 0, fmt.Errorf("redislock: acquire %q: %w", key, err)
	}
	token, err := acquireScript.Run(ctx, b.client, b.names(key).keys,
		owner, ttlArg(ttl), b.waitersTTLArg, b.idArg).Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, fmt.Errorf("redislock: acquire %q: %w", key, lock.ErrNotAcquired)
	case err != nil:
		return 0, fmt.Errorf("redislock: acquire %q: %w", key, err)
	case token <= 0:
		return 0, fmt.Errorf("redislock: acquire %q: server returned token %d", key, token)
	}
	return uint64(token), nil
}

// Refresh implements lock.Backend.
func (b *Backend) Refresh(ctx context.Context, key, owner string, token uint64, ttl time.Duration) error {
	if err := lock.CheckArgs(key, owner, ttl); err != nil {
		return fmt.Errorf("redislock: refresh %q: %w", key, err)
	}
	n, err := refreshScript.Run(ctx, b.client, []string{b.Key(key)}, b.value(owner, token), ttlArg(ttl)).Int64()
	switch {
	case err != nil:
		return fmt.Errorf("redislock: refresh %q: %w", key, err)
	case n != 1:
		return fmt.Errorf("redislock: refresh %q token %d: %w", key, token, lock.ErrNotHeld)
	}
	return nil
}

// Release implements lock.Backend. When a waiter is queued for key (see
// Waiter), the release grants the key to the first one still waiting and
// tells that waiter's backend alone. Otherwise it frees the key, wakes this
// backend's own watchers (Watch) at once and, through the published
// message, those of every other backend.
func (b *Backend) Release(ctx context.Context, key, owner string, token uint64) error {
	if err := lock.CheckArgs(key, owner, lock.NoTTL); err != nil {
		return fmt.Errorf("redislock: release %q: %w", key, err)
	}
	if err := b.free(ctx, key, releaseScript, b.value(owner, token), token); err != nil {
		return fmt.Errorf("redislock: release %q token %d: %w", key, token, err)
	}
	return nil
}

// ReleaseOwner implements lock.OwnerReleaser: when owner holds key,
// whatever the token, it frees the key as Release does, handing it to the
// first waiter still queued, else waking watchers. When key is free or
// held by another owner it changes nothing.
func (b *Backend) ReleaseOwner(ctx context.Context, key, owner string) error {
	if err := lock.CheckArgs(key, owner, lock.NoTTL); err != nil {
		return fmt.Errorf("redislock: release %q by owner: %w", key, err)
	}
	if err := b.free(ctx, key, releaseOwnerScript, owner, 0); err != nil && !errors.Is(err, lock.ErrNotHeld) {
		return fmt.Errorf("redislock: release %q by owner: %w", key, err)
	}
	return nil // freed, or owner did not hold the key
}

// free runs script, release.lua or releaseowner.lua (both end in lib.lua's
// pass_on), on key with lease as its first argument, and then tells this
// backend's waiters: the one a grant was handed to, or the watchers when
// the key was freed (token is what they are told; 0 when unknown). It
// returns an error wrapping lock.ErrNotHeld when the script freed nothing.
func (b *Backend) free(ctx context.Context, key string, script *redis.Script, lease string, token uint64) error {
	b.notify.releasing(key)
	n := b.names(key)
	res, err := script.Run(ctx, b.client, n.keys, lease, n.channelArg, b.idArg, b.grantPfxArg, b.queueTTLArg).Result()
	if err != nil {
		return err
	}
	handed, err := b.passedOn(res)
	if err == nil && !handed {
		b.notify.released(key, token)
	}
	return err
}

// passedOn reads the answer of release.lua, releaseowner.lua or leave.lua
// (lib.lua's pass_on): it delivers a grant handed to a waiter of this
// backend, and reports whether the key went to a queued waiter rather than
// being freed. A lease that had expired, with nobody granted the key since,
// is reported as lock.ErrNotHeld even though the key went to the waiter.
func (b *Backend) passedOn(res any) (handed bool, err error) {
	switch r := res.(type) {
	case int64:
		switch r {
		case 0:
			return false, lock.ErrNotHeld
		case 1:
			return false, nil // freed
		case 2:
			return true, nil // handed to a waiter of another backend
		case -2:
			return true, lock.ErrNotHeld
		}
	case string:
		g, expired := strings.CutPrefix(r, "-")
		b.notify.grant(g)
		if expired {
			return true, lock.ErrNotHeld
		}
		return true, nil
	}
	return false, fmt.Errorf("unexpected reply %v (%T)", res, res)
}

// Watch implements lock.Notifier, for callers that retry TryAcquire
// themselves (lock.Locker queues instead, through Waiter). It never blocks
// on the network: the backend's one shared subscription is started in the
// background if it is not running, and a release before it is in place is
// reported only when the subscription is confirmed (a signal to every
// watched key). A release that hands the key to a queued waiter is not
// reported: the key is not free.
//
// A release signals one watcher of the key, the oldest, and none while
// another watcher's signal is still pending (for up to a second): read the
// channel, or call stop, promptly.
func (b *Backend) Watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	return b.notify.watch(key)
}

var (
	_ lock.Backend       = (*Backend)(nil)
	_ lock.Notifier      = (*Backend)(nil)
	_ lock.Handoff       = (*Backend)(nil)
	_ lock.OwnerReleaser = (*Backend)(nil)
)
