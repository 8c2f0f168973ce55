package mongostore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// DefaultLockWait is the default budget for acquiring an item's lock.
const DefaultLockWait = 2 * time.Second

type nopObserver struct{}

func (nopObserver) LockWaited(string, time.Duration, bool) {}
func (nopObserver) LockHeld(string, int)                   {}

// LockedConfig configures a Locked strategy.
type LockedConfig struct {
	// Name is the strategy's name (strategy.Local, strategy.MongoLease,
	// strategy.RedisLock, strategy.EtcdLock, ...); it also names the item's fence
	// for this lock.
	Name string

	// Locker hands out the item locks.
	Locker *lock.Locker

	// Wait is how long a decrement waits for the lock before giving up
	// with ErrLockUnavailable. Default DefaultLockWait.
	Wait time.Duration

	// Fencing makes the read and the write carry the lease's token (see
	// Store.FencedRead). Turn it off only to demonstrate the clobbering it
	// prevents, and always for a lock whose tokens are not comparable
	// across replicas (locallock: each process counts from 1).
	Fencing bool

	// Delay is slept between the read and the write, under the lock. It
	// is cut short when the lease ends.
	Delay time.Duration

	// Stall is a fault-drill knob: slept after the last lease check, just
	// before the stock write, and not cut short by anything. It stands for
	// the pause no client-side check can see (a GC pause, a stopped
	// process, a slow network at the worst moment): whatever the lease
	// does meanwhile, the write is sent, and only the fence can refuse it.
	Stall time.Duration

	// Observer receives lock metrics. nil means none.
	Observer inventory.LockObserver

	// Logger receives lease release failures. nil means slog.Default().
	Logger *slog.Logger
}

// Locked is the read-modify-write under a lock, in four steps (after an
// unlocked look that answers sold_out early, see Decrement):
//
//  1. lock: acquire the item's lease within the wait budget;
//  2. read: the fenced read, which registers the lease's token on the item;
//  3. modify and write: compute stock-qty, then the fenced write, which
//     applies only if no newer token has been registered since;
//  4. release the lease.
//
// Steps 2 and 3 run under the lease's Guard: when the lease is lost (its
// renewal failed, it expired, or Close released it) the delay is cut short
// and the stock write is not sent (ErrLeaseLost). The check before the
// write narrows the window but cannot close it: a holder can pause right
// after the check. The fence closes it: the database rejects the write of a
// holder that a newer one has superseded (ErrFenced), which no client-side
// check can guarantee.
//
// Writes, once sent, are not cancelled by the lease or the request (see
// StoreOptions.WriteTimeout): the fence, not the lease, decides whether they
// may apply, and the replica must learn whether it sold. That includes the
// fenced read, which writes the token; the lease is checked right after it.
type Locked struct {
	store   *Store
	cfg     LockedConfig
	obs     inventory.LockObserver
	steps   stepTimer // the sale steps' times, when obs is a inventory.StepObserver
	logger  *slog.Logger
	queue   *keyQueue
	mu      sync.Mutex
	held    map[*lock.Lease]func() // each lease held, and what ends its turn in the queue
	closing bool

	// afterRead, when set (by tests), runs between the read and the write.
	afterRead func(ctx context.Context)
	// now is the clock of the expiry check before the write (tests move it).
	now func() time.Time
}

// NewLocked returns a lock strategy.
func NewLocked(store *Store, cfg LockedConfig) (*Locked, error) {
	switch {
	case store == nil:
		return nil, fmt.Errorf("%w: nil store", inventory.ErrInvalid)
	case cfg.Locker == nil:
		return nil, fmt.Errorf("%w: strategy %q has no Locker", inventory.ErrInvalid, cfg.Name)
	case !fencePattern.MatchString(cfg.Name):
		return nil, fmt.Errorf("%w: strategy name %q: want 1 to 32 of [a-z0-9-]", inventory.ErrInvalid, cfg.Name)
	case cfg.Wait < 0 || cfg.Delay < 0 || cfg.Stall < 0:
		return nil, fmt.Errorf("%w: strategy %q: negative wait, delay or stall", inventory.ErrInvalid, cfg.Name)
	}
	if cfg.Wait == 0 {
		cfg.Wait = DefaultLockWait
	}
	l := &Locked{
		store: store, cfg: cfg, obs: cfg.Observer, logger: cmp.Or(cfg.Logger, slog.Default()), queue: newKeyQueue(),
		held: make(map[*lock.Lease]func()), now: time.Now,
	}
	if l.obs == nil {
		l.obs = nopObserver{}
	}
	if so, ok := l.obs.(inventory.StepObserver); ok {
		l.steps = stepTimer{obs: so, strategy: cfg.Name}
	}
	return l, nil
}

// Name returns the configured name.
func (l *Locked) Name() string { return l.cfg.Name }

// Fencing reports whether the strategy fences its reads and writes.
func (l *Locked) Fencing() bool { return l.cfg.Fencing }

// Decrement implements Strategy.
func (l *Locked) Decrement(ctx context.Context, req inventory.Request) (inventory.Sale, error) {
	sku, qty := req.SKU, req.Qty

	// Step 0, before the four steps: a plain read that answers sold_out (or
	// not_found) without touching the lock. Stock that is already short
	// cannot become enough by waiting for the lock, and the answer is
	// correct as of that committed read. It spares the lock service and the
	// store the three writes (acquire, fenced read, release) that every
	// request would otherwise spend to learn that nothing is left, which is
	// most requests in a sell-out. It can never cause a sale: the decision
	// to sell is taken only under the lock, in step 2.
	if it, err := l.store.getDoc(ctx, l.store.items, sku); err != nil {
		return inventory.Sale{}, err
	} else if it.Stock < qty && it.Stock+l.store.expiredUnits(ctx, it) < qty {
		return inventory.Sale{}, soldOutOf(it, qty)
	}

	// Step 1: lock, within the wait budget.
	start := time.Now()
	lease, err := l.acquire(ctx, sku)
	if err != nil {
		return inventory.Sale{}, err
	}
	l.steps.since(strategy.StepLock, start)
	// Step 4, release, runs on every path; after a successful write it
	// runs early, before the order is recorded, which needs no lock.
	defer l.release(ctx, lease)

	gctx, cancel := lease.Guard(ctx)
	defer cancel()

	// Step 2: read. The fenced read registers our token, so from here on
	// every holder older than us is rejected.
	start = time.Now()
	it, fence, err := l.read(ctx, gctx, lease, sku)
	l.steps.since(strategy.StepRead, start)
	if err != nil {
		return inventory.Sale{}, err
	}
	if it.Stock < qty && l.store.expiredUnits(ctx, it) == 0 {
		return inventory.Sale{}, soldOut(sku, it.Stock, qty)
	}

	// Step 3: modify and write.
	if l.afterRead != nil {
		l.afterRead(gctx)
	}
	if err := pause(gctx, l.cfg.Delay); err != nil {
		return inventory.Sale{}, l.interrupted(gctx, lease, err)
	}
	if err := l.stillHeld(gctx, lease); err != nil {
		return inventory.Sale{}, err
	}
	if l.cfg.Stall > 0 {
		time.Sleep(l.cfg.Stall) // deliberately deaf to the lease: see LockedConfig.Stall
	}
	o := l.store.newOrder(req, l.cfg.Name, fence)
	sl := l.saleOf(it, &o)
	start = time.Now()
	after, err := l.store.sell(ctx, sl)
	l.steps.since(strategy.StepWrite, start)
	if err != nil {
		return inventory.Sale{}, err
	}
	l.release(ctx, lease)
	return l.store.soldTimed(ctx, o, after.Stock, 1, l.steps), nil
}

// read is step 2 under lease: the fenced read, which registers the lease's
// token on the item and returns it as the fence the write carries, or
// with fencing off a plain read (and fence 0). The fenced read is a
// write, so it runs to completion like the stock write (see
// StoreOptions.WriteTimeout); the lease is checked right after it.
func (l *Locked) read(ctx, gctx context.Context, lease *lock.Lease, sku string) (it itemDoc, fence int64, err error) {
	if l.cfg.Fencing {
		// Tokens are uint64; the item stores BSON int64. No backend comes
		// near 2^63, but a wrapped token would break the ordering silently.
		if lease.Token() > math.MaxInt64 {
			return itemDoc{}, 0, fmt.Errorf("inventory: %s token %d does not fit a BSON int64", l.cfg.Name, lease.Token())
		}
		fence = int64(lease.Token())
		rctx, cancel := l.store.commitContext(ctx)
		it, err = l.store.fencedRead(rctx, sku, l.cfg.Name, fence)
		cancel()
	} else {
		it, err = l.store.getDoc(gctx, l.store.items, sku)
	}
	if err == nil && gctx.Err() != nil {
		err = context.Cause(gctx)
	}
	if err != nil {
		return itemDoc{}, 0, l.interrupted(gctx, lease, err)
	}
	return it, fence, nil
}

// stillHeld is the last check before the stock write: the lease has not
// ended, and its expiry, by this process's clock, has not passed. The
// second half matters after a pause: a process that wakes past its
// lease's expiry may reach this check before its watchdog has run and
// declared the lease lost. The fence still refuses whatever slips past
// (a pause right after this check); this makes lease_lost say so sooner.
func (l *Locked) stillHeld(gctx context.Context, lease *lock.Lease) error {
	if gctx.Err() != nil {
		return l.interrupted(gctx, lease, context.Cause(gctx))
	}
	if exp := lease.Expiry(); !l.now().Before(exp) {
		return fmt.Errorf("%w: %s lease on %q token %d expired at %s by this replica's clock",
			inventory.ErrLeaseLost, l.cfg.Name, lease.Key(), lease.Token(), exp.Format(time.RFC3339Nano))
	}
	return nil
}

// acquire takes the lease on sku within the wait budget, queueing first
// behind this replica's other requests for the same item (see keyQueue),
// and tracks the lease until release.
func (l *Locked) acquire(ctx context.Context, sku string) (*lock.Lease, error) {
	wctx, cancel := context.WithTimeout(ctx, l.cfg.Wait)
	defer cancel()
	start := time.Now()
	key := strategy.LockKey(sku)
	leave, err := l.queue.enter(wctx, key)
	var lease *lock.Lease
	if err != nil {
		err = fmt.Errorf("queued behind this replica's requests for %q: %w", key, err)
	} else {
		lease, err = l.cfg.Locker.Acquire(wctx, key)
		if err != nil {
			leave()
		}
	}
	l.obs.LockWaited(l.cfg.Name, time.Since(start), err == nil)
	if err != nil {
		if ctx.Err() != nil {
			// The caller gave up (or its own deadline passed): not a lock
			// problem, and not worth a 503 of ours.
			return nil, fmt.Errorf("inventory: %s lock on %q: %w", l.cfg.Name, sku, context.Cause(ctx))
		}
		return nil, fmt.Errorf("%w: %s, within %v: %w", inventory.ErrLockUnavailable, l.cfg.Name, l.cfg.Wait, err)
	}
	l.mu.Lock()
	closing := l.closing
	if !closing {
		l.held[lease] = leave
	}
	l.mu.Unlock()
	if closing {
		l.releaseLease(lease)
		leave()
		return nil, fmt.Errorf("%w: %s lock on %q: shutting down", inventory.ErrLockUnavailable, l.cfg.Name, sku)
	}
	l.obs.LockHeld(l.cfg.Name, 1)
	return lease, nil
}

// release gives the lease back, unless Close already did.
func (l *Locked) release(ctx context.Context, lease *lock.Lease) {
	l.mu.Lock()
	leave, mine := l.held[lease]
	delete(l.held, lease)
	l.mu.Unlock()
	if !mine {
		return
	}
	l.obs.LockHeld(l.cfg.Name, -1)
	start := time.Now()
	l.releaseLease(lease)
	l.steps.since(strategy.StepRelease, start)
	// The next request of this replica may poll for the lock only now.
	leave()
}

func (l *Locked) releaseLease(lease *lock.Lease) {
	// Release even if the request is gone: a lease left behind blocks
	// every other replica until its TTL runs out.
	ctx, cancel := context.WithTimeout(context.Background(), l.store.writeTimeout)
	defer cancel()
	if err := lease.Release(ctx); err != nil && !errors.Is(err, lock.ErrNotHeld) {
		l.logger.Warn("lock release failed; the lease will expire by itself",
			slog.String("strategy", l.cfg.Name), slog.String("key", lease.Key()),
			slog.Uint64("token", lease.Token()), slog.Any("error", err))
	}
}

// interrupted classifies an error of the critical section: when the lease
// has ended, that is the reason, whatever the operation reported. The
// lease's cause names the key and the token (package lock or the backend
// put them there), so only the strategy is added here.
func (l *Locked) interrupted(gctx context.Context, lease *lock.Lease, err error) error {
	if lerr := lease.Err(); lerr != nil {
		return fmt.Errorf("%w: %s: %w", inventory.ErrLeaseLost, l.cfg.Name, lerr)
	}
	if errors.Is(err, inventory.ErrFenced) || errors.Is(err, inventory.ErrNotFound) || errors.Is(err, inventory.ErrInvalid) {
		return err
	}
	if gctx.Err() != nil {
		return fmt.Errorf("inventory: %s: %w", l.cfg.Name, context.Cause(gctx))
	}
	return err
}

// Held returns the number of leases this strategy holds right now.
func (l *Locked) Held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held)
}

// Close releases every lease still held and makes later decrements fail
// with ErrLockUnavailable. A decrement still running loses its lease: it
// stops before its write (ErrLeaseLost) or, if it is already writing, its
// fenced write decides. Call it at shutdown, after in-flight requests had
// their chance to finish.
func (l *Locked) Close() {
	l.mu.Lock()
	l.closing = true
	held := l.held
	l.held = make(map[*lock.Lease]func())
	l.mu.Unlock()
	for lease, leave := range held {
		l.obs.LockHeld(l.cfg.Name, -1)
		l.releaseLease(lease)
		leave()
	}
}

// buildLocked makes the read-modify-write under a lease of in's lock
// service, fenced by its tokens when in is Fenced.
func buildLocked(in strategy.Info, d Deps) (inventory.Strategy, error) {
	l, err := d.locker(in)
	if err != nil {
		return nil, err
	}
	return NewLocked(d.Store, LockedConfig{
		Name: in.Name, Locker: l, Wait: d.LockWait, Fencing: in.Fenced && d.Fencing,
		Delay: d.Delay, Stall: d.Stall, Observer: d.Observer, Logger: d.Logger,
	})
}
