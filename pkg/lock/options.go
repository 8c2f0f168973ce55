package lock

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"time"
)

// Defaults used when an Option does not say otherwise.
const (
	// DefaultTTL is long enough for a critical section that does a few
	// database round trips even through the slow embedded store, and short
	// enough that a crashed holder blocks others for seconds, not minutes.
	DefaultTTL = 10 * time.Second

	// DefaultRenewFraction renews a lease when a third of its TTL has
	// passed, so two renewals can fail before the lease expires.
	DefaultRenewFraction = 1.0 / 3

	// MinTTL is the shortest TTL any Locker accepts. Below it a renewal,
	// one write that may queue behind every other write on the store,
	// cannot reliably complete before the lease expires.
	MinTTL = 50 * time.Millisecond

	// MaxKeyLen is the longest key accepted, in bytes.
	MaxKeyLen = 256
)

// DefaultRetry is the retry policy used when none is given: the first retry
// waits up to 2 ms, each later one up to twice as long, never more than
// 100 ms, until the context ends.
var DefaultRetry = RetryPolicy{Min: 2 * time.Millisecond, Max: 100 * time.Millisecond}

// Option configures a Locker (as its default) or a single Acquire call.
type Option func(*options)

type options struct {
	ttl           time.Duration
	owner         string
	ownerPrefix   string
	retry         RetryPolicy
	renewFraction float64
	observer      Observer
}

func defaultOptions() options {
	return options{
		ttl:           DefaultTTL,
		ownerPrefix:   defaultOwnerPrefix(),
		retry:         DefaultRetry,
		renewFraction: DefaultRenewFraction,
	}
}

// WithTTL sets the lease time to live. Default: DefaultTTL.
func WithTTL(ttl time.Duration) Option { return func(o *options) { o.ttl = ttl } }

// WithOwner fixes the owner identity. Default: a fresh identity per
// acquisition, the owner prefix plus a random suffix, so that two goroutines
// of one process never share a lease.
//
// A fixed owner makes the lock reentrant by identity: an Acquire by the
// owner that already holds the key succeeds at once with a new, higher
// token, and the older lease of that owner is superseded (its next refresh
// or release answers ErrNotHeld). That is how a restarted process that kept
// its identity gets its key back without waiting out the TTL.
func WithOwner(owner string) Option { return func(o *options) { o.owner = owner } }

// WithOwnerPrefix sets the prefix of generated owner identities. Default:
// $REPLICA_ID if set, else the host name, followed by the process id.
func WithOwnerPrefix(prefix string) Option { return func(o *options) { o.ownerPrefix = prefix } }

// WithRetry sets the retry policy of a blocking Acquire. Default: DefaultRetry.
func WithRetry(p RetryPolicy) Option { return func(o *options) { o.retry = p } }

// WithRenewal sets when the watchdog renews a lease, as a fraction of its
// TTL (0 < f < 1); 0 turns automatic renewal off, and the lease is then lost
// at its expiry unless Refresh is called. Default: DefaultRenewFraction.
func WithRenewal(fraction float64) Option { return func(o *options) { o.renewFraction = fraction } }

// validate checks a call's key and resolved options, with the checks
// CheckArgs makes (the owner only when fixed: a generated one is valid).
func (o *options) validate(key string, floor time.Duration) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := checkTTL(o.ttl, floor); err != nil {
		return err
	}
	if o.owner != "" {
		if err := checkOwner(o.owner); err != nil {
			return err
		}
	}
	if o.renewFraction < 0 || o.renewFraction >= 1 {
		return fmt.Errorf("%w: renewal fraction %v is outside [0, 1)", ErrBadConfig, o.renewFraction)
	}
	return o.retry.validate()
}

func (o *options) ownerFor() string {
	if o.owner != "" {
		return o.owner
	}
	// Unique, not secret: the runtime's ChaCha8 generator, seeded from the
	// system's, is as unlikely to repeat as crypto/rand and needs no
	// system call.
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], rand.Uint64())
	return o.ownerPrefix + "-" + hex.EncodeToString(b[:])
}

func defaultOwnerPrefix() string {
	id := os.Getenv("REPLICA_ID")
	if id == "" {
		id, _ = os.Hostname()
	}
	if id == "" {
		id = "unknown"
	}
	return fmt.Sprintf("%s-%d", id, os.Getpid())
}
