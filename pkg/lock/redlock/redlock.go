package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/internal/keys"
)

// Errors of a Backend, besides those of package lock.
var (
	// ErrNoQuorum means too few servers answered for the call to succeed or
	// to be refused: the outcome is unknown.
	ErrNoQuorum = errors.New("redlock: too few servers answered")

	// ErrExpired means a grant took so long that its validity ran out
	// before it was confirmed; it was given back.
	ErrExpired = errors.New("redlock: grant outlived its validity")
)

// DefaultKeyPrefix is the prefix of every key the backend uses.
const DefaultKeyPrefix = "stocklock:redlock:"

// KeyPrefix returns the prefix for the keys of a namespace (a database, an
// application) sharing the servers with others: DefaultKeyPrefix,
// namespace and a slash, or DefaultKeyPrefix alone for "". redislock and
// etcdlock follow the same rule, each from its own default prefix.
func KeyPrefix(namespace string) string { return keys.Prefix(DefaultKeyPrefix, namespace) }

// KeyName returns the name of the key that holds the lease on key, on each
// server, for a backend whose prefix is prefix: prefix + key. Its fence
// adds ":fence".
func KeyName(prefix, key string) string { return prefix + key }

// DriftFactor is the share of the TTL that a grant's validity leaves for
// clock drift between the servers and the holder, as redsync's default.
const DriftFactor = 0.01

// TimeoutFactor is the share of the TTL that each round waits for a
// server: one that takes longer counts as not answering, so that a slow
// server does not eat the validity. redsync's default is smaller, too
// little for the short TTLs of the tests on a loaded machine.
const TimeoutFactor = 0.1

var (
	//go:embed prepare.lua
	prepareSrc    string
	prepareScript = redis.NewScript(prepareSrc)

	//go:embed confirm.lua
	confirmSrc    string
	confirmScript = redis.NewScript(confirmSrc)

	//go:embed releaseowner.lua
	releaseOwnerSrc    string
	releaseOwnerScript = redis.NewScript(releaseOwnerSrc)
)

// Option configures a Backend.
type Option func(*Backend)

// WithKeyPrefix sets the prefix of the backend's keys, to keep several
// applications (or test runs) apart on the same servers. Default:
// DefaultKeyPrefix.
func WithKeyPrefix(prefix string) Option { return func(b *Backend) { b.prefix = prefix } }

// Backend is a lock.Backend on independent Redis servers. It is safe for
// concurrent use.
type Backend struct {
	clients []redis.UniversalClient
	rs      *redsync.Redsync
	quorum  int
	prefix  string
}

// New returns a backend over clients, one per independent server (an odd
// number: five tolerates two servers down). It does not close them. Give
// the clients no retries (MaxRetries -1, DialerRetries 1): each round
// waits for every server at most TimeoutFactor of the TTL, and a
// client that retries a server that is down spends that time in vain.
func New(clients []redis.UniversalClient, opts ...Option) (*Backend, error) {
	if len(clients) == 0 {
		return nil, fmt.Errorf("redlock: %w: no servers", lock.ErrBadConfig)
	}
	pools := make([]redsyncredis.Pool, len(clients))
	for i, c := range clients {
		if c == nil {
			return nil, fmt.Errorf("redlock: %w: client %d is nil", lock.ErrBadConfig, i)
		}
		pools[i] = goredis.NewPool(c)
	}
	b := &Backend{
		clients: clients,
		rs:      redsync.New(pools...),
		quorum:  len(clients)/2 + 1,
		prefix:  DefaultKeyPrefix,
	}
	for _, opt := range opts {
		opt(b)
	}
	return b, nil
}

// Quorum returns how many servers make a majority.
func (b *Backend) Quorum() int { return b.quorum }

// Key returns the name of the key that holds the lease on key (KeyName
// with the backend's prefix).
func (b *Backend) Key(key string) string { return KeyName(b.prefix, key) }

func (b *Backend) keys(key string) []string {
	k := b.Key(key)
	return []string{k, k + ":fence"}
}

func value(owner string, token uint64) string {
	return strconv.FormatUint(token, 10) + ":" + owner
}

// mutex returns redsync's mutex for one lease of key.
func (b *Backend) mutex(key, val string, ttl time.Duration) *redsync.Mutex {
	return b.rs.NewMutex(b.Key(key),
		redsync.WithExpiry(ttl),
		redsync.WithTries(1),
		redsync.WithDriftFactor(DriftFactor),
		redsync.WithTimeoutFactor(TimeoutFactor),
		redsync.WithValue(val),
		redsync.WithGenValueFunc(func() (string, error) { return val, nil }),
	)
}

// refusable is the number of refusals that leaves no majority possible.
func (b *Backend) refusable() int { return len(b.clients) - b.quorum + 1 }

// TryAcquire implements lock.Backend in three rounds, each on every server
// at once: prepare.lua picks the token, redsync takes the key, confirm.lua
// records the token (see the package documentation).
func (b *Backend) TryAcquire(ctx context.Context, key, owner string, ttl time.Duration) (uint64, error) {
	if err := lock.CheckArgs(key, owner, ttl); err != nil {
		return 0, fmt.Errorf("redlock: acquire %q: %w", key, err)
	}
	start := time.Now()
	keys := b.keys(key)
	wait := time.Duration(float64(ttl) * TimeoutFactor)

	floors := b.each(ctx, wait, func(ctx context.Context, c redis.UniversalClient) (int64, error) {
		return prepareScript.Run(ctx, c, keys, owner).Int64()
	})
	if err := b.quorumAnswered(floors); err != nil {
		return 0, fmt.Errorf("redlock: acquire %q: %w", key, err)
	}
	var last int64
	for _, r := range floors {
		if r.err == nil {
			last = max(last, r.n)
		}
	}
	token := uint64(last) + 1
	val := value(owner, token)

	m := b.mutex(key, val, ttl)
	if err := m.TryLockContext(ctx); err != nil {
		if refusals(err) >= b.refusable() {
			return 0, fmt.Errorf("redlock: acquire %q: %w (%w)", key, lock.ErrNotAcquired, err)
		}
		return 0, fmt.Errorf("redlock: acquire %q: %w", key, noQuorum(err))
	}

	tokenArg := strconv.FormatUint(token, 10)
	confirms := b.each(ctx, wait, func(ctx context.Context, c redis.UniversalClient) (int64, error) {
		return confirmScript.Run(ctx, c, keys, val, tokenArg).Int64()
	})
	confirmed, refused := 0, 0
	for _, r := range confirms {
		switch {
		case r.err != nil:
		case r.n == 1:
			confirmed++
		default:
			refused++
		}
	}
	var err error
	switch {
	case confirmed < b.quorum && refused >= b.refusable():
		err = fmt.Errorf("redlock: acquire %q token %d: %w: %d of %d servers confirmed it, a later grant or an expiry took the others",
			key, token, lock.ErrNotAcquired, confirmed, len(b.clients))
	case confirmed < b.quorum:
		err = fmt.Errorf("redlock: acquire %q token %d: %w: %d of %d servers confirmed it, first error: %w",
			key, token, ErrNoQuorum, confirmed, len(b.clients), firstErr(confirms))
	case time.Since(start) >= ttl-time.Duration(float64(ttl)*DriftFactor):
		err = fmt.Errorf("redlock: acquire %q token %d: %w: the grant took %v of a %v TTL", key, token, ErrExpired, time.Since(start), ttl)
	default:
		return token, nil
	}
	// Give back what was taken, as redsync does for a grant that failed.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
	defer cancel()
	_, _ = m.UnlockContext(rctx)
	return 0, err
}

// Refresh implements lock.Backend with redsync's extension: the lease's
// value is set to expire ttl from now on every server that still holds it,
// and it stands if a majority did so within the validity.
func (b *Backend) Refresh(ctx context.Context, key, owner string, token uint64, ttl time.Duration) error {
	if err := lock.CheckArgs(key, owner, ttl); err != nil {
		return fmt.Errorf("redlock: refresh %q: %w", key, err)
	}
	ok, err := b.mutex(key, value(owner, token), ttl).ExtendContext(ctx)
	switch {
	case ok:
		return nil
	case refusals(err) >= b.refusable():
		return fmt.Errorf("redlock: refresh %q token %d: %w (%w)", key, token, lock.ErrNotHeld, err)
	}
	return fmt.Errorf("redlock: refresh %q token %d: %w", key, token, noQuorum(err))
}

// Release implements lock.Backend with redsync's unlock: the lease's key is
// deleted on every server that still holds it.
func (b *Backend) Release(ctx context.Context, key, owner string, token uint64) error {
	if err := lock.CheckArgs(key, owner, lock.NoTTL); err != nil {
		return fmt.Errorf("redlock: release %q: %w", key, err)
	}
	// Unlock does not use the expiry: any TTL will do.
	ok, err := b.mutex(key, value(owner, token), lock.MinTTL).UnlockContext(ctx)
	switch {
	case ok:
		return nil
	case refusals(err) >= b.refusable():
		return fmt.Errorf("redlock: release %q token %d: %w (%w)", key, token, lock.ErrNotHeld, err)
	}
	return fmt.Errorf("redlock: release %q token %d: %w", key, token, noQuorum(err))
}

// ReleaseOwner implements lock.OwnerReleaser: releaseowner.lua deletes the
// key on every server where owner holds it, whatever the token, and leaves
// it alone elsewhere. Once a majority has answered, owner holds no majority
// and so no lease. With fewer answers the outcome is unknown, and the error
// wraps ErrNoQuorum.
func (b *Backend) ReleaseOwner(ctx context.Context, key, owner string) error {
	if err := lock.CheckArgs(key, owner, lock.NoTTL); err != nil {
		return fmt.Errorf("redlock: release %q by owner: %w", key, err)
	}
	k := b.keys(key)[:1]
	res := b.each(ctx, 0, func(ctx context.Context, c redis.UniversalClient) (int64, error) {
		return releaseOwnerScript.Run(ctx, c, k, owner).Int64()
	})
	if err := b.quorumAnswered(res); err != nil {
		return fmt.Errorf("redlock: release %q by owner: %w", key, err)
	}
	return nil
}

// quorumAnswered returns an error wrapping ErrNoQuorum, with the first
// server's error, unless a majority of the servers answered rs.
func (b *Backend) quorumAnswered(rs []result) error {
	answered := 0
	for _, r := range rs {
		if r.err == nil {
			answered++
		}
	}
	if answered < b.quorum {
		return fmt.Errorf("%w: %d of %d servers, first error: %w", ErrNoQuorum, answered, len(b.clients), firstErr(rs))
	}
	return nil
}

// noQuorum wraps ErrNoQuorum around redsync's error, unless it already is
// one of redsync's sentinels that says more (a grant that outlived its
// validity).
func noQuorum(err error) error {
	switch {
	case err == nil:
		return ErrNoQuorum
	case errors.Is(err, redsync.ErrFailed), errors.Is(err, redsync.ErrExtendFailed):
		return fmt.Errorf("%w (%w)", ErrExpired, err)
	}
	return fmt.Errorf("%w (%w)", ErrNoQuorum, err)
}

// refusals counts the servers that answered, in redsync's error err, that
// the key is not this lease's: taken by another value, or gone.
func refusals(err error) int {
	var taken *redsync.ErrTaken
	if errors.As(err, &taken) {
		return len(taken.Nodes)
	}
	n := 0
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case *redsync.ErrNodeTaken:
			n++
		case interface{ Unwrap() []error }:
			for _, e := range e.Unwrap() {
				walk(e)
			}
		default:
			if err == redsync.ErrLockAlreadyExpired {
				n++
			}
		}
	}
	walk(err)
	return n
}

// result is one server's answer in a round.
type result struct {
	n   int64
	err error
}

// each runs call on every server at once, each bounded by wait (by ctx
// alone when wait is 0), and returns their answers in the servers' order.
func (b *Backend) each(ctx context.Context, wait time.Duration, call func(context.Context, redis.UniversalClient) (int64, error)) []result {
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	res := make([]result, len(b.clients))
	var wg sync.WaitGroup
	for i, c := range b.clients {
		wg.Go(func() {
			res[i].n, res[i].err = call(ctx, c)
		})
	}
	wg.Wait()
	return res
}

// firstErr returns the first error among results, for a message.
func firstErr(rs []result) error {
	for _, r := range rs {
		if r.err != nil {
			return r.err
		}
	}
	return nil
}

var (
	_ lock.Backend       = (*Backend)(nil)
	_ lock.OwnerReleaser = (*Backend)(nil)
)
