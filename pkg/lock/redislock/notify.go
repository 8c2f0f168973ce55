package redislock

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocklock/stocklock/pkg/lock/internal/keys"
	"github.com/stocklock/stocklock/pkg/lock/internal/wakeq"
)

// healthInterval is how long the subscription may stay silent before it is
// pinged; a second silent interval after the ping means the connection is
// dead without having been closed (a half-open TCP connection after a network
// partition), and the subscription is made again on a new one.
const healthInterval = 15 * time.Second

// notifier fans the messages of one Backend's subscription out to its
// queued waiters (grants, see Waiter) and its watchers (releases, see
// Watch).
//
// There is one subscription per Backend, on a dedicated connection, started
// at the first Waiter or Watch: subscribing per Acquire would cost a round
// trip (and a connection) per waiter, and a blocked waiter must not wait for
// it. It is to the backend's own grant channel (SUBSCRIBE, so that only the
// backend a grant is for receives it) and, from the first Watch on, to the
// release channels of every key under the prefix (PSUBSCRIBE). The pattern
// is left out until then because the server matches every PUBLISH against
// every pattern subscribed, grants included.
//
// A watcher's wake-up follows the rules below; a queued waiter's grant
// needs none of them, since the server already chose the one waiter.
//
// A release signals one waiter per backend, the one waiting longest, not
// all of them: only one can take the key, and waking every waiter sends them
// all to the server at once, where all but one lose, back off for longer and
// fall behind newcomers; that is what makes the tail wait long. Waking the
// oldest waiter first keeps the order close to first come, first served.
type notifier struct {
	client       Client
	chanPfx      string
	pattern      string // release channels
	grantChannel string // this backend's grant channel
	watching     bool   // a Watch was made: subscribe to pattern too

	mu      sync.Mutex
	keys    map[string]*waitList
	waits   map[uint64]*waiter // queued waiters by sequence number
	seq     uint64             // the last waiter's sequence number
	started bool
	closed  bool
	ps      *redis.PubSub // current subscription, for close
	cancel  context.CancelFunc
	done    chan struct{}
}

// waitList is the queue of one key's watchers, in the order they called
// Watch.
type waitList struct {
	q wakeq.Queue
	// released is the highest token known to be released, by this backend
	// or by a message. Tokens increase per key, so a message about a lower
	// or equal one is old news, such as the echo of a release this
	// backend already signalled for.
	released uint64
}

// staleSignal is how long a pending signal counts as a waiter on its way. A
// Locker takes its signal within moments; one still pending after this long
// belongs to a watcher that stopped reading, which must not hold back the
// signals of the waiters behind it.
const staleSignal = time.Second

func (n *notifier) init(client Client, chanPfx, grantChannel string) {
	n.client = client
	n.chanPfx = chanPfx
	n.pattern = keys.GlobEscape(chanPfx) + "*"
	n.grantChannel = grantChannel
	n.keys = make(map[string]*waitList)
	n.waits = make(map[uint64]*waiter)
	n.done = make(chan struct{})
}

// start starts the subscription if it is not running. n.mu must be held.
func (n *notifier) start() {
	if n.started || n.closed {
		return
	}
	n.started = true
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go n.run(ctx)
}

// addWaiter registers a queued waiter and returns its sequence number.
func (n *notifier) addWaiter(w *waiter) uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.start()
	n.seq++
	n.waits[n.seq] = w
	return n.seq
}

func (n *notifier) removeWaiter(seq uint64) {
	n.mu.Lock()
	delete(n.waits, seq)
	n.mu.Unlock()
}

// grant delivers a grant, "<sequence number>:<token>", to the waiter it is
// for, if that waiter still waits.
func (n *notifier) grant(payload string) {
	s, t, _ := strings.Cut(payload, ":")
	seq, err1 := strconv.ParseUint(s, 10, 64)
	token, err2 := strconv.ParseUint(t, 10, 64)
	if err1 != nil || err2 != nil || token == 0 {
		return
	}
	n.mu.Lock()
	w := n.waits[seq]
	n.mu.Unlock()
	if w != nil {
		w.deliver(token)
	}
}

func (n *notifier) watch(key string) (<-chan struct{}, func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, func() {}
	}
	n.start()
	if !n.watching {
		n.watching = true
		if ps := n.ps; ps != nil {
			// Subscribe to releases in the background: Watch must not
			// wait for the network. A subscription made after this reads
			// n.watching and subscribes itself.
			go func() { _ = ps.PSubscribe(context.Background(), n.pattern) }()
		}
	}
	l := n.keys[key]
	if l == nil {
		l = &waitList{}
		n.keys[key] = l
	}
	w := l.q.Push()

	var once sync.Once
	return w.C, func() { once.Do(func() { n.unwatch(key, l, w) }) }
}

func (n *notifier) unwatch(key string, l *waitList, w *wakeq.Watcher) {
	n.mu.Lock()
	defer n.mu.Unlock()
	l.q.Remove(w)
	if l.q.Empty() && n.keys[key] == l {
		delete(n.keys, key)
	}
}

// signal makes sure one waiter is on its way to retry: if none has a signal
// pending, the longest-waiting one gets one. A second signal while one is
// pending would only send a second waiter to lose the same race. The send
// never blocks, so a slow waiter cannot stall a release or the subscription.
func (l *waitList) signal() { l.q.WakeOne(staleSignal) }

// releasing signals a waiter of this backend just before its own release
// is sent, so that the waiter's attempt reaches Redis right behind the
// release instead of a notification's round trip later. Without this head
// start the releasing goroutine, when it asks for the key again at once,
// wins nearly every time, and its waiters starve. If the attempt arrives
// before the release after all, it fails, and released signals again.
func (n *notifier) releasing(key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if l := n.keys[key]; l != nil {
		l.signal()
	}
}

// released records a successful release by this backend, whose message
// will arrive later, and makes sure a waiter retries now.
func (n *notifier) released(key string, token uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if l := n.keys[key]; l != nil {
		l.released = max(l.released, token)
		l.signal()
	}
}

// subscribed handles the confirmation of one of the subscription's two
// parts, at first or after a reconnection: anything published while that
// part was not in place was lost. The pattern's confirmation signals a
// watcher on every key, so that no watcher misses a release; the grant
// channel's wakes every queued waiter, whose next attempt claims a grant it
// missed, so that none sleeps out its backoff. Each part signals only its
// own, so that the other's confirmation, which may come later, does not
// wake a watcher a second time for nothing. A signal too many costs one
// attempt.
func (n *notifier) subscribed(s *redis.Subscription) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case s.Kind == "psubscribe" && s.Channel == n.pattern:
		for _, l := range n.keys {
			l.signal()
		}
	case s.Kind == "subscribe" && s.Channel == n.grantChannel:
		for _, w := range n.waits {
			w.deliver(0)
		}
	}
}

// deliver handles a release message.
func (n *notifier) deliver(channel, payload string) {
	key, ok := strings.CutPrefix(channel, n.chanPfx)
	if !ok {
		return
	}
	token, err := strconv.ParseUint(payload, 10, 64)
	n.mu.Lock()
	defer n.mu.Unlock()
	l := n.keys[key]
	if l == nil || (err == nil && token <= l.released) {
		return
	}
	l.released = max(l.released, token)
	l.signal()
}

func (n *notifier) close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	started, ps := n.started, n.ps
	n.mu.Unlock()
	if !started {
		return
	}
	n.cancel()
	if ps != nil {
		_ = ps.Close() // unblocks the receive in run
	}
	<-n.done
}

// errSilent ends a subscription whose connection stopped answering.
var errSilent = errors.New("redislock: subscription silent after a ping")

// run keeps the subscription alive until close, or until the client is
// closed. go-redis reconnects and resubscribes a PubSub by itself after a
// connection error; messages published meanwhile are lost, which only
// delays waiters until their next backoff.
func (n *notifier) run(ctx context.Context) {
	defer close(n.done)
	for ctx.Err() == nil {
		ps := n.client.PSubscribe(ctx) // no pattern yet: a PubSub to add to
		n.mu.Lock()
		if n.closed {
			n.mu.Unlock()
			_ = ps.Close()
			return
		}
		n.ps = ps
		watching := n.watching
		n.mu.Unlock()
		// A failure here shows in receive, which retries; go-redis
		// subscribes again to everything asked for on reconnection.
		_ = ps.Subscribe(ctx, n.grantChannel)
		if watching {
			_ = ps.PSubscribe(ctx, n.pattern)
		}

		err := n.receive(ctx, ps)
		_ = ps.Close()
		if errors.Is(err, redis.ErrClosed) {
			return // the client (or this backend) was closed
		}
	}
}

func (n *notifier) receive(ctx context.Context, ps *redis.PubSub) error {
	var (
		pinged  bool
		failing bool
		delay   time.Duration
	)
	for {
		msg, err := ps.ReceiveTimeout(ctx, healthInterval)
		switch {
		case err == nil:
			pinged, delay = false, 0
			if failing {
				failing = false
				slog.Info("redislock: subscription restored", "channel", n.grantChannel)
			}
			switch m := msg.(type) {
			case *redis.Message:
				if m.Pattern == "" && m.Channel == n.grantChannel {
					n.grant(m.Payload)
				} else {
					n.deliver(m.Channel, m.Payload)
				}
			case *redis.Subscription:
				n.subscribed(m)
			}
		case ctx.Err() != nil || errors.Is(err, redis.ErrClosed):
			return redis.ErrClosed
		case isTimeout(err):
			if pinged {
				return errSilent
			}
			pinged = true
			_ = ps.Ping(ctx) // the Pong arrives through ReceiveTimeout
		default:
			// Redis is down or restarting. go-redis dials again at the next
			// receive; pace the attempts.
			if !failing {
				failing = true
				slog.Warn("redislock: subscription failed; waiters fall back to their retry backoff",
					"channel", n.grantChannel, "err", err)
			}
			delay = min(max(2*delay, 50*time.Millisecond), 2*time.Second)
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
