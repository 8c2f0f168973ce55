package etcdlock

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// queueWatch is a FIFO's one etcd watch on the deletions in one key's
// queue, shared by the FIFO's waiters on that key. Each waiter gets every
// deletion and keeps its own set of keys ahead of it.
//
// The watch has no start revision: the server counts it among its synced
// watchers and sends each deletion as it is applied, while a watch from an
// explicit past revision (what concurrency.Mutex makes for every wait) is
// caught up only every 100 ms. It is made once per key and kept while
// waiters come and go (and for watchLinger after the last leaves), so a
// contended lock costs no watch creation per acquisition. A waiter joins
// before it reads the queue; when a watch is (re)made after that read, its
// Created response tells the waiter to read the queue again (resync),
// since the deletions in between were not sent.
//
// Every waiter sees every deletion in its queue: fine for tens of waiters
// on one key, wasteful for thousands.
type queueWatch struct {
	waiters map[*queueWaiter]struct{}
	linger  *time.Timer
	cancel  context.CancelFunc
}

// queueWaiter is one Acquire's view of its queue. Its fields are guarded
// by FIFO.qmu.
type queueWaiter struct {
	wake    chan struct{} // 1-buffered: something below changed
	deleted []deletion    // since the waiter last looked
	resync  bool          // the watch was (re)made: read the queue again
}

// join registers a waiter on the queue at pfx, starting its watch if there
// is none. leave unregisters it.
func (f *FIFO) join(pfx string) (w *queueWaiter, leave func(), err error) {
	f.qmu.Lock()
	defer f.qmu.Unlock()
	if f.qclosed {
		return nil, nil, ErrClosed
	}
	qw := f.queues[pfx]
	if qw == nil {
		ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
		qw = &queueWatch{waiters: make(map[*queueWaiter]struct{}), cancel: cancel}
		f.queues[pfx] = qw
		f.qwg.Go(func() { f.runQueueWatch(ctx, pfx, qw) })
	}
	if qw.linger != nil {
		qw.linger.Stop()
		qw.linger = nil
	}
	w = &queueWaiter{wake: make(chan struct{}, 1)}
	qw.waiters[w] = struct{}{}
	return w, func() { f.leave(pfx, qw, w) }, nil
}

func (f *FIFO) leave(pfx string, qw *queueWatch, w *queueWaiter) {
	f.qmu.Lock()
	defer f.qmu.Unlock()
	delete(qw.waiters, w)
	if len(qw.waiters) > 0 || f.qclosed {
		return
	}
	qw.linger = time.AfterFunc(watchLinger, func() {
		f.qmu.Lock()
		defer f.qmu.Unlock()
		if len(qw.waiters) == 0 && f.queues[pfx] == qw {
			delete(f.queues, pfx)
			qw.cancel()
		}
	})
}

func (f *FIFO) runQueueWatch(ctx context.Context, pfx string, qw *queueWatch) {
	for ctx.Err() == nil && f.client.Ctx().Err() == nil {
		f.watchQueueOnce(ctx, pfx, qw)
		t := time.NewTimer(watchRetry)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// watchQueueOnce runs one etcd watch until it fails or ctx ends.
func (f *FIFO) watchQueueOnce(ctx context.Context, pfx string, qw *queueWatch) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for resp := range f.client.Watch(ctx, pfx, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify()) {
		if resp.Created {
			f.qmu.Lock()
			for w := range qw.waiters {
				w.resync = true
				w.signal()
			}
			f.qmu.Unlock()
			continue
		}
		if resp.Canceled || resp.Err() != nil {
			return
		}
		f.qmu.Lock()
		for w := range qw.waiters {
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					w.deleted = append(w.deleted, deletion{string(ev.Kv.Key), ev.Kv.ModRevision})
				}
			}
			w.signal()
		}
		f.qmu.Unlock()
	}
}

type deletion struct {
	key string
	rev int64
}

func (w *queueWaiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// closeQueues stops every queue watch and waits for their goroutines.
func (f *FIFO) closeQueues() {
	f.qmu.Lock()
	f.qclosed = true
	for pfx, qw := range f.queues {
		if qw.linger != nil {
			qw.linger.Stop()
		}
		qw.cancel()
		delete(f.queues, pfx)
	}
	f.qmu.Unlock()
	f.qwg.Wait()
}
