package mongostore

import (
	"context"
	"fmt"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/strategy"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// lockConds are the conditions of a lock holder's write that is not an
// absolute stock write: the item still at the version it read and, with
// fencing, still registered with its token (see FencedWrite).
func (l *Locked) lockConds(fence, version int64) bson.D {
	d := bson.D{{Key: "version", Value: version}}
	if l.cfg.Fencing {
		d = append(d, bson.E{Key: "fences." + l.cfg.Name, Value: fence})
	}
	return d
}

// lockMiss explains a write of the holder of fence that matched nothing:
// fenced out, or the item changed since its read (see writeMiss).
func (l *Locked) lockMiss(fence, version int64) func(itemDoc) error {
	return func(cur itemDoc) error {
		if l.cfg.Fencing && cur.Fences[l.cfg.Name] != fence {
			return fmt.Errorf("%w: %s write %q with token %d (registered: %d)", inventory.ErrFenced, l.cfg.Name, cur.SKU, fence, cur.Fences[l.cfg.Name])
		}
		if cur.Version != version {
			return fmt.Errorf("%w: %s write %q read at version %d (version now %d)", inventory.ErrStale, l.cfg.Name, cur.SKU, version, cur.Version)
		}
		return nil
	}
}

// sellExpired is step 3 of a sale whose read found the stock short and
// holds expired by the store's clock that cover it: the write, fenced and
// conditional on the version read like FencedWrite, returns their units
// and takes the sale's in one update.
func (l *Locked) sellExpired(ctx, gctx context.Context, lease *lock.Lease, it itemDoc, req inventory.Request, fence int64) (inventory.Sale, error) {
	if err := l.stillHeld(gctx, lease); err != nil {
		return inventory.Sale{}, err
	}
	o := l.store.newOrder(req, l.cfg.Name, fence)
	start := time.Now()
	miss := l.lockMiss(fence, it.Version)
	after, err := l.store.takeStock(ctx, take{
		sku: req.SKU, qty: req.Qty, set: bson.D{{Key: pendingPath(o.ID), Value: o}},
		cond: append(l.lockConds(fence, it.Version), notAborted(o)), read: &it,
		miss: func(cur itemDoc) error {
			if gaveUp(cur, o) {
				return abandoned("fenced write", o)
			}
			return miss(cur)
		},
	})
	l.steps.since(strategy.StepWrite, start)
	if err != nil {
		return inventory.Sale{}, err
	}
	l.release(ctx, lease)
	return l.store.soldTimed(ctx, o, after.Stock, 1, l.steps), nil
}

// Hold implements inventory.Holder for a lock strategy: the hold is taken
// under the item's lease, after the fenced read, by one update fenced and
// conditional on the version read, so a holder paused past its lease
// cannot hold units on a stock another holder has read since.
func (l *Locked) Hold(ctx context.Context, req inventory.HoldRequest) (inventory.Hold, error) {
	if err := req.Validate(); err != nil {
		return inventory.Hold{}, err
	}
	if it, err := l.store.getDoc(ctx, l.store.items, req.SKU); err != nil {
		return inventory.Hold{}, err
	} else if it.Stock < req.Qty && it.Stock+l.store.expiredUnits(ctx, it) < req.Qty {
		if _, ok := it.Holds[req.ID]; ok && req.ID != "" {
			return l.store.GetHold(ctx, req.SKU, req.ID)
		}
		if err := l.store.holdShort(ctx, req.SKU, req.Qty, soldOut(req.SKU, it.Stock, req.Qty)); err != nil {
			return inventory.Hold{}, err
		}
		// Not short any more (the item changed since the read): hold
		// under the lock, from its read.
	}
	lease, err := l.acquire(ctx, req.SKU)
	if err != nil {
		return inventory.Hold{}, err
	}
	defer l.release(ctx, lease)
	fence, err := l.fenceOf(lease)
	if err != nil {
		return inventory.Hold{}, err
	}
	gctx, cancel := lease.Guard(ctx)
	defer cancel()
	var it itemDoc
	if l.cfg.Fencing {
		rctx, rcancel := l.store.commitContext(ctx)
		it, err = l.store.fencedRead(rctx, req.SKU, l.cfg.Name, fence)
		rcancel()
	} else {
		it, err = l.store.getDoc(gctx, l.store.items, req.SKU)
	}
	if err == nil && gctx.Err() != nil {
		err = context.Cause(gctx)
	}
	if err != nil {
		return inventory.Hold{}, l.interrupted(gctx, lease, err)
	}
	if err := l.stillHeld(gctx, lease); err != nil {
		return inventory.Hold{}, err
	}
	return l.store.createHold(ctx, req, l.cfg.Name, fence, l.lockConds(fence, it.Version), &it, l.lockMiss(fence, it.Version))
}
