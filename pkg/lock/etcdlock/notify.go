package etcdlock

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stocklock/stocklock/pkg/lock/internal/wakeq"
)

// Timing of the notifier's watches.
const (
	// watchLinger keeps a key's watch open after its last watcher left: a
	// contended key gets new watchers all the time, and creating a watch
	// costs a round trip that the watcher would otherwise wait for.
	watchLinger = 2 * time.Second
	// watchReadyWait bounds how long Watch waits for its watch to be in
	// place on the server.
	watchReadyWait = time.Second
	// watchRetry paces new watches after one failed (no leader, server
	// down); the watchers fall back on their backoff meanwhile.
	watchRetry = 100 * time.Millisecond
)

// notifier fans the deletions of each watched key out to the backend's
// watchers of it, one watcher per deletion (wakeq).
//
// It also remembers, from the same watch, whether the key's last event was
// a grant to some owner: TryAcquire then checks with a read (no Raft write,
// no disk sync) before it sends a transaction that would be refused.
type notifier struct {
	client *clientv3.Client

	mu     sync.Mutex
	keys   map[string]*keyWatch
	closed bool
	wg     sync.WaitGroup
}

// keyWatch is one etcd watch on one key and the queue of its local
// watchers.
type keyWatch struct {
	q      wakeq.Queue
	linger *time.Timer
	cancel context.CancelFunc
	ready  chan struct{} // closed when the first watch is in place

	// The key's state as of the last event of the current watch; known
	// is false until the first event after the watch was (re)made.
	known  bool
	holder string // the owner, or "" after a deletion
}

func (n *notifier) init(client *clientv3.Client) {
	n.client = client
	n.keys = make(map[string]*keyWatch)
}

func (n *notifier) watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, func() {}
	}
	kw := n.keys[key]
	if kw == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
		kw = &keyWatch{cancel: cancel, ready: make(chan struct{})}
		n.keys[key] = kw
		n.wg.Go(func() { n.run(wctx, key, kw) })
	}
	if kw.linger != nil {
		kw.linger.Stop()
		kw.linger = nil
	}
	w := kw.q.Push()
	n.mu.Unlock()

	t := time.NewTimer(watchReadyWait)
	select {
	case <-kw.ready:
	case <-ctx.Done():
	case <-t.C:
	}
	t.Stop()

	var once sync.Once
	return w.C, func() { once.Do(func() { n.unwatch(key, kw, w) }) }
}

// heldByOther reports whether the last event the backend saw for key was a
// grant to another owner than owner. It is a hint, possibly stale.
func (n *notifier) heldByOther(key, owner string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	kw := n.keys[key]
	return kw != nil && kw.known && kw.holder != "" && kw.holder != owner
}

func (n *notifier) unwatch(key string, kw *keyWatch, w *wakeq.Watcher) {
	n.mu.Lock()
	defer n.mu.Unlock()
	// A watcher that leaves with a wake-up it did not act on passes it on.
	if kw.q.Remove(w) {
		kw.q.WakeOne(0)
	}
	if kw.q.Empty() && !n.closed {
		kw.linger = time.AfterFunc(watchLinger, func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			if kw.q.Empty() && n.keys[key] == kw {
				delete(n.keys, key)
				kw.cancel()
			}
		})
	}
}

// run keeps a watch on key's deletions until ctx ends. The watch has no
// start revision, so the server counts it among its synced watchers and
// sends each deletion as soon as it is applied; a watch from an explicit
// past revision would be caught up only every 100 ms. A watch that fails is
// made again, and everyone is woken then, since a deletion may have been
// missed in between.
func (n *notifier) run(ctx context.Context, key string, kw *keyWatch) {
	first := true
	for ctx.Err() == nil && n.client.Ctx().Err() == nil {
		n.watchOnce(ctx, key, kw, &first)
		select {
		case <-ctx.Done():
		case <-time.After(watchRetry):
		}
	}
}

// watchOnce runs one etcd watch until it fails or ctx ends.
func (n *notifier) watchOnce(ctx context.Context, key string, kw *keyWatch, first *bool) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for resp := range n.client.Watch(ctx, key, clientv3.WithCreatedNotify()) {
		if resp.Created {
			n.mu.Lock()
			kw.known = false
			n.mu.Unlock()
			if *first {
				*first = false
				close(kw.ready)
			} else {
				n.mu.Lock()
				kw.q.WakeAll()
				n.mu.Unlock()
			}
			continue
		}
		if resp.Canceled || resp.Err() != nil {
			n.mu.Lock()
			kw.known = false
			n.mu.Unlock()
			return
		}
		n.mu.Lock()
		for _, ev := range resp.Events {
			kw.known = true
			if ev.Type == clientv3.EventTypeDelete {
				kw.holder = ""
				kw.q.WakeOne(0)
			} else {
				kw.holder = string(ev.Kv.Value)
			}
		}
		n.mu.Unlock()
	}
}

func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	for key, kw := range n.keys {
		if kw.linger != nil {
			kw.linger.Stop()
		}
		kw.cancel()
		delete(n.keys, key)
	}
	n.mu.Unlock()
	n.wg.Wait()
}
