package mongostore

import (
	"context"

	"github.com/stocklock/stocklock/pkg/inventory"
)

// lockConds are a lock holder's conditions on its write: the item still
// at the version it read and, with fencing, still registered with its
// token (see FencedWrite).
func (l *Locked) lockConds(fence, version int64) []cond {
	op := l.cfg.Name + " write"
	if !l.cfg.Fencing {
		return []cond{versionIs(op, version)}
	}
	// The fence first: a holder that is both fenced out and stale was
	// superseded, which is what ErrFenced says.
	return []cond{fenceIs(op, l.cfg.Name, fence), versionIs(op, version)}
}

// saleOf is step 3's write of o, from the item it as read under the lock.
// With enough stock read it is the read-modify-write the strategy
// teaches: the absolute stock left, fenced and conditional on the version
// read (FencedWrite's), or, with fencing off, trusting the lock alone.
// With the stock short it takes o's units in one update that returns the
// holds expired by the store's clock, under the same conditions.
func (l *Locked) saleOf(it itemDoc, o *inventory.Order) sale {
	sl := sale{op: l.cfg.Name + " write", sku: it.SKU, qty: o.Qty, read: &it, conds: l.lockConds(o.Fence, it.Version)}
	if it.Stock >= o.Qty {
		remaining := it.Stock - o.Qty
		o.Remaining, sl.stock, sl.blind = &remaining, &remaining, true
		if !l.cfg.Fencing {
			sl.conds = nil
		}
	}
	sl.orders = []inventory.Order{*o}
	return sl
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
	gctx, cancel := lease.Guard(ctx)
	defer cancel()
	it, fence, err := l.read(ctx, gctx, lease, req.SKU)
	if err != nil {
		return inventory.Hold{}, err
	}
	if err := l.stillHeld(gctx, lease); err != nil {
		return inventory.Hold{}, err
	}
	return l.store.createHold(ctx, req, l.cfg.Name, fence, l.lockConds(fence, it.Version), &it)
}
