package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stocklock/stocklock/pkg/lock"
)

// FIFO is a fair lock on etcd: waiters are granted a key strictly in the
// order they asked for it. It is safe for concurrent use; every Acquire is
// a separate waiter, also within one process.
//
// Each Acquire puts a waiter key prefix+"q/"+escaped(key)+"/"+lease+"-"+slot
// (escaped with url.PathEscape, so no key's queue contains another's),
// attached to the FIFO's session lease, and holds the lock once no waiter
// key with a lower create revision is left: it watches the queue's
// deletions (a release, a waiter giving up, a session expiring) until the
// keys ahead of its own are all gone. The token is the waiter key's create
// revision. A release is one transaction; the next waiter needs no request
// of its own to learn that it holds the lock.
//
// All of a FIFO's keys share one etcd lease, renewed in the background
// every third of its TTL; when a renewal fails for a whole TTL the lease is
// lost, every Held of that session is done (cause wrapping
// lock.ErrLeaseLost), and the next Acquire starts a new session. Close
// revokes the lease, which releases everything the FIFO holds or waits for.
//
// A FIFO lock and a Backend lock on the same key name are different locks.
type FIFO struct {
	client *clientv3.Client
	prefix string
	ttl    time.Duration
	value  string // written into waiter keys, for people reading etcd

	mu     sync.Mutex
	sess   *session
	closed bool

	// qmu guards queues and everything in them, and names.
	qmu     sync.Mutex
	queues  map[string]*queueWatch // by queue prefix
	names   map[string]bool        // waiter keys in use
	qclosed bool
	qwg     sync.WaitGroup
}

// ErrClosed is returned by Acquire after Close.
var ErrClosed = errors.New("etcdlock: FIFO closed")

// NewFIFO returns a FIFO over client; its session starts at the first
// Acquire. WithTTL sets the session's lease TTL, WithKeyPrefix the prefix.
// It does not close the client.
func NewFIFO(client *clientv3.Client, opts ...Option) (*FIFO, error) {
	if client == nil {
		return nil, fmt.Errorf("etcdlock: %w: nil client", lock.ErrInvalidArgument)
	}
	c := newConfig(opts)
	if err := CheckTTL(c.ttl); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	return &FIFO{
		client: client,
		prefix: c.prefix + "q/",
		ttl:    c.ttl,
		value:  fmt.Sprintf("%s-%d", host, os.Getpid()),
		queues: make(map[string]*queueWatch),
		names:  make(map[string]bool),
	}, nil
}

// QueuePrefix returns the etcd prefix under which key's waiters queue.
func (f *FIFO) QueuePrefix(key string) string { return f.prefix + url.PathEscape(key) + "/" }

// Close ends the session: it revokes the lease, which releases every lock
// the FIFO holds and removes its waiters, and ends their Helds (cause
// ErrClosed). Acquire fails after Close.
func (f *FIFO) Close() error {
	f.mu.Lock()
	f.closed = true
	s := f.sess
	f.sess = nil
	f.mu.Unlock()
	f.closeQueues()
	if s == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.close(ctx)
}

// session returns the live session, starting one if there is none.
func (f *FIFO) session(ctx context.Context) (*session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrClosed
	}
	if f.sess != nil && f.sess.ctx.Err() == nil {
		return f.sess, nil
	}
	s, err := startSession(ctx, f.client, f.ttl)
	if err != nil {
		return nil, err
	}
	f.sess = s
	return s, nil
}

// Acquire waits until it holds key. If ctx ends first, or a request fails,
// it removes its waiter key (retrying in the background while the session
// lives, if need be) and returns the error; a waiter that gives up never
// holds the queue up.
func (f *FIFO) Acquire(ctx context.Context, key string) (*Held, error) {
	if err := checkArgs("acquire", key, "fifo", 0, false); err != nil {
		return nil, err
	}
	s, err := f.session(ctx)
	if err != nil {
		return nil, fmt.Errorf("etcdlock: acquire %q: session: %w", key, err)
	}
	// Stop waiting if the session ends: our waiter key is gone with it.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(s.ctx, func() { cancel(context.Cause(s.ctx)) })()

	pfx := f.QueuePrefix(key)
	myKey := f.claimName(pfx, s.id)

	// Listen to the queue's deletions before joining it, so that none
	// after our read of the queue is missed.
	w, leave, err := f.join(pfx)
	if err != nil {
		f.freeName(myKey)
		return nil, fmt.Errorf("etcdlock: acquire %q: %w", key, err)
	}
	defer leave()

	// Join the queue and read it in one round trip: the read sees the
	// put, and every other key in it is ahead of ours.
	resp, err := f.client.Txn(ctx).Then(
		clientv3.OpPut(myKey, f.value, clientv3.WithLease(s.id)),
		clientv3.OpGet(pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		f.abandon(s, myKey, 0)
		return nil, fmt.Errorf("etcdlock: acquire %q: %w", key, err)
	}
	myRev := resp.Header.Revision
	ahead := aheadOf(resp.Responses[1].GetResponseRange().Kvs, myRev)
	if err := f.waitQueue(ctx, w, pfx, myKey, myRev, ahead); err != nil {
		f.abandon(s, myKey, myRev)
		return nil, fmt.Errorf("etcdlock: acquire %q: %w", key, err)
	}
	return newHeld(f, s, key, myKey, myRev), nil
}

// claimName returns a waiter key name for the queue at pfx that no other
// Acquire or Held of this FIFO uses: the session's lease ID and the lowest
// free slot number. Names are reused rather than random so that a busy
// queue does not leave a trail of dead keys in etcd's index until the next
// compaction, which every read of the queue would walk through.
func (f *FIFO) claimName(pfx string, lease clientv3.LeaseID) string {
	f.qmu.Lock()
	defer f.qmu.Unlock()
	for n := 0; ; n++ {
		name := fmt.Sprintf("%s%016x-%d", pfx, int64(lease), n)
		if !f.names[name] {
			f.names[name] = true
			return name
		}
	}
}

func (f *FIFO) freeName(name string) {
	f.qmu.Lock()
	delete(f.names, name)
	f.qmu.Unlock()
}

// aheadOf returns the keys among kvs created before rev.
func aheadOf(kvs []*mvccpb.KeyValue, rev int64) map[string]bool {
	ahead := make(map[string]bool)
	for _, kv := range kvs {
		if kv.CreateRevision < rev {
			ahead[string(kv.Key)] = true
		}
	}
	return ahead
}

// errWaiterGone means a waiter's own key was deleted while it waited: its
// session's lease expired or was revoked.
var errWaiterGone = fmt.Errorf("waiter key gone (session lease expired or revoked): %w", lock.ErrLeaseLost)

// waitQueue returns once every key in ahead is gone. No key can join the
// queue ahead of ours, so the set only shrinks, and the deletion that
// empties it hands us the lock with no further request.
//
// Waiter key names are reused (see claimName), so a deletion counts only
// if it is newer than the read the set came from: an older one was of an
// earlier key of the same name.
func (f *FIFO) waitQueue(ctx context.Context, w *queueWaiter, pfx, myKey string, myRev int64, ahead map[string]bool) error {
	since := myRev
	for {
		f.qmu.Lock()
		deleted, resync := w.deleted, w.resync
		w.deleted, w.resync = nil, false
		f.qmu.Unlock()

		if resync {
			// The watch was (re)made after our read: deletions before it
			// were not sent to us. Read what is left ahead.
			r, err := f.client.Txn(ctx).Then(
				clientv3.OpGet(pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(myRev-1)),
				clientv3.OpGet(myKey, clientv3.WithKeysOnly()),
			).Commit()
			if err != nil {
				return err
			}
			if mine := r.Responses[1].GetResponseRange().Kvs; len(mine) == 0 || mine[0].CreateRevision != myRev {
				return errWaiterGone
			}
			clear(ahead)
			maps.Copy(ahead, aheadOf(r.Responses[0].GetResponseRange().Kvs, myRev))
			since = r.Header.Revision
		}
		for _, d := range deleted {
			if d.rev <= since {
				continue
			}
			if d.key == myKey {
				return errWaiterGone
			}
			delete(ahead, d.key)
		}
		if len(ahead) == 0 {
			return nil
		}
		select {
		case <-w.wake:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// abandon removes a waiter key after a failed or cancelled Acquire, and
// frees its name. rev 0 means the put's outcome is unknown. A key left
// behind would block the queue until the session ends, so a failed attempt
// is retried in the background for as long as the session lives.
func (f *FIFO) abandon(s *session, myKey string, rev int64) {
	del := func(ctx context.Context) error {
		if rev == 0 {
			_, err := f.client.Delete(ctx, myKey)
			return err
		}
		_, err := f.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(myKey), "=", rev)).
			Then(clientv3.OpDelete(myKey)).
			Commit()
		return err
	}
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
	err := del(ctx)
	cancel()
	if err == nil || s.ctx.Err() != nil {
		f.freeName(myKey)
		return
	}
	// The name stays claimed: a later waiter must not take it while a
	// delete of it may still be on its way.
	go func() {
		for d := 50 * time.Millisecond; s.ctx.Err() == nil; d = min(2*d, 2*time.Second) {
			t := time.NewTimer(d)
			select {
			case <-s.ctx.Done():
			case <-t.C:
			}
			t.Stop()
			ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
			err := del(ctx)
			cancel()
			if err == nil {
				return
			}
		}
	}()
}

// Held is a lock held through a FIFO.
type Held struct {
	f      *FIFO
	key    string
	myKey  string
	token  uint64
	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   func() bool
	mu     sync.Mutex // serializes Release
}

func newHeld(f *FIFO, s *session, key, myKey string, rev int64) *Held {
	ctx, cancel := context.WithCancelCause(context.Background())
	h := &Held{f: f, key: key, myKey: myKey, token: uint64(rev), ctx: ctx, cancel: cancel}
	h.stop = context.AfterFunc(s.ctx, func() {
		// The session's names are not used again: the next one has
		// another lease, in the names of its keys.
		f.freeName(myKey)
		cancel(context.Cause(s.ctx))
	})
	return h
}

// Key returns the locked key.
func (h *Held) Key() string { return h.key }

// Token returns the fencing token: the create revision of the waiter key,
// greater than the token of every earlier holder of the key.
func (h *Held) Token() uint64 { return h.token }

// Done is closed when the lock is released or its session is lost.
func (h *Held) Done() <-chan struct{} { return h.ctx.Done() }

// Ctx is cancelled when the lock is released (cause lock.ErrReleased) or
// its session is lost (cause wrapping lock.ErrLeaseLost) or closed
// (ErrClosed).
func (h *Held) Ctx() context.Context { return h.ctx }

// Err returns nil while the lock is held, else the reason it ended.
func (h *Held) Err() error {
	if h.ctx.Err() == nil {
		return nil
	}
	return context.Cause(h.ctx)
}

// Guard returns a child of parent that is also cancelled, with the lock's
// cause, when the lock ends.
func (h *Held) Guard(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	stop := context.AfterFunc(h.ctx, func() { cancel(context.Cause(h.ctx)) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// Release deletes the waiter key, which hands the lock to the next waiter.
// It returns an error wrapping lock.ErrNotHeld if the lock had already
// ended. After any other error the key may still be there (the lock stays
// held while the session lives), and Release may be called again.
func (h *Held) Release(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.Err(); err != nil {
		return fmt.Errorf("etcdlock: release %q: %w (%w)", h.key, lock.ErrNotHeld, err)
	}
	resp, err := h.f.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.myKey), "=", int64(h.token))).
		Then(clientv3.OpDelete(h.myKey)).
		Commit()
	switch {
	case err != nil:
		return fmt.Errorf("etcdlock: release %q: %w", h.key, err)
	case !resp.Succeeded:
		if h.stop() {
			h.f.freeName(h.myKey)
		}
		h.cancel(fmt.Errorf("%w: %q token %d: waiter key gone", lock.ErrLeaseLost, h.key, h.token))
		return fmt.Errorf("etcdlock: release %q token %d: %w", h.key, h.token, lock.ErrNotHeld)
	}
	if h.stop() {
		h.f.freeName(h.myKey)
	}
	h.cancel(lock.ErrReleased)
	return nil
}

// session is one etcd lease renewed in the background, with the same rule
// as lock.Lease's watchdog: the local expiry counts from before each
// request, so the session is declared lost no later than the server
// expires it.
type session struct {
	client *clientv3.Client
	id     clientv3.LeaseID
	ttl    time.Duration

	ctx     context.Context // cancelled when the session ends
	cancel  context.CancelCauseFunc
	stopped chan struct{}

	mu     sync.Mutex
	expiry time.Time
}

func startSession(ctx context.Context, client *clientv3.Client, ttl time.Duration) (*session, error) {
	start := time.Now()
	g, err := client.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancelCause(context.Background())
	s := &session{
		client: client, id: g.ID, ttl: ttl,
		ctx: sctx, cancel: cancel, stopped: make(chan struct{}),
		expiry: start.Add(ttl),
	}
	go s.keepAlive()
	return s, nil
}

func (s *session) keepAlive() {
	defer close(s.stopped)
	every := s.ttl / 3
	retry := every / 4
	next := time.Now().Add(every)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		s.mu.Lock()
		expiry := s.expiry
		s.mu.Unlock()
		wait, renew := time.Until(expiry), false
		if d := time.Until(next); d < wait {
			wait, renew = d, true
		}
		t.Reset(max(wait, 0))
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		if !renew {
			if !time.Now().Before(expiry) {
				s.cancel(fmt.Errorf("%w: session lease %x expired at %s before a renewal succeeded",
					lock.ErrLeaseLost, int64(s.id), expiry.Format(time.RFC3339Nano)))
				// The server may not have expired it yet (our clock
				// counts from before each request): revoke it, if the
				// server can be reached, so the queue moves on now.
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					defer cancel()
					_, _ = s.client.Revoke(ctx, s.id)
				}()
				return
			}
			continue
		}
		start := time.Now()
		ctx, cancel := context.WithDeadline(s.ctx, expiry)
		ka, err := s.client.KeepAliveOnce(ctx, s.id)
		cancel()
		switch {
		case err == nil && time.Duration(ka.TTL)*time.Second >= s.ttl:
			s.mu.Lock()
			s.expiry = start.Add(s.ttl)
			s.mu.Unlock()
			next = time.Now().Add(every)
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			s.cancel(fmt.Errorf("%w: session lease %x not found", lock.ErrLeaseLost, int64(s.id)))
			return
		default:
			next = time.Now().Add(retry)
		}
	}
}

// close stops the renewals and revokes the lease.
func (s *session) close(ctx context.Context) error {
	s.cancel(ErrClosed)
	<-s.stopped
	if _, err := s.client.Revoke(ctx, s.id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("etcdlock: revoke session lease: %w", err)
	}
	return nil
}
