package mongostore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// This file is the buckets strategy and its sale path, top to bottom:
// Decrement, round, take, takeItem. The mechanics of a split sku (the
// bucket documents, reading them and the total, spread, merge and unsplit,
// generations, PutSplit) are in split.go; splitAware, which lets the other
// strategies sell a split sku, is in splitaware.go.

// Bucket counts.
const (
	// DefaultBuckets is the number of documents a sku's stock is split
	// across by the buckets strategy.
	DefaultBuckets = 8
	// MaxBuckets bounds it: a merge or a PUT writes every bucket.
	MaxBuckets = 64
)

// bucketRounds bounds the rounds of one buckets decrement: each round
// either sells, answers sold out, or lost a race to another writer that
// changed the split (a spread, a merge, a PUT) and so made progress.
const bucketRounds = 8

// Buckets splits a sku's stock across k documents, its buckets, so that
// sales of one hot sku write k documents instead of one. A sale takes
// from one bucket, chosen at random, with the atomic strategy's
// conditional update:
//
//	updateOne({_id: "<sku>#<i>", gen: G, stock: {$gte: qty}, aborted.<id>: {$exists: false}},
//	          {$inc: {stock: -qty, version: 1}, $set: {pending.<id>: order}})
//
// and records its order as atomic does. A bucket that cannot cover qty
// sends it to the others; when none can, a merge freezes every bucket,
// reads the exact total, and in one write of the item unsplits it and
// takes the sale from the total, or answers sold out because the total is
// short: it never answers sold out while the buckets together hold qty.
// See docs/buckets.md for the protocol and why it sells every unit once.
type Buckets struct {
	store *Store
	k     int
	// splits caches each sku's split generation and bucket count
	// (cachedSplit), so that a sale writes without reading first. A stale
	// one only costs a miss: a bucket's generation moves on before its
	// item's does.
	splits sync.Map
}

// cachedSplit is what a replica remembers of a sku's split.
type cachedSplit struct {
	gen int64
	k   int
}

// NewBuckets returns the buckets strategy, splitting new splits into k
// buckets (1 to MaxBuckets; 0 means DefaultBuckets). An item keeps the
// count of its first split.
func NewBuckets(store *Store, k int) (*Buckets, error) {
	if k == 0 {
		k = DefaultBuckets
	}
	if k < 1 || k > MaxBuckets {
		return nil, fmt.Errorf("%w: %d buckets: want 1 to %d", inventory.ErrInvalid, k, MaxBuckets)
	}
	return &Buckets{store: store, k: k}, nil
}

// Name returns strategy.Buckets.
func (b *Buckets) Name() string { return strategy.Buckets }

var _ = addBuilder(strategy.Buckets, func(d Deps) (inventory.Strategy, error) { return NewBuckets(d.Store, d.Buckets) })

// Decrement implements Strategy.
func (b *Buckets) Decrement(ctx context.Context, req inventory.Request) (inventory.Sale, error) {
	return b.decrement(ctx, req, strategy.Buckets)
}

// decrement is Decrement recording its order as strategy name's.
func (b *Buckets) decrement(ctx context.Context, req inventory.Request, name string) (inventory.Sale, error) {
	o := b.store.newOrder(req, name, 0)
	if c, ok := b.splits.Load(req.SKU); ok {
		// The fast path: one write, no read.
		c := c.(cachedSplit)
		sale, took, err := b.take(ctx, o, bucketID(req.SKU, rand.IntN(c.k)), c.gen)
		if took || err != nil {
			return sale, err
		}
	}
	for r := range bucketRounds {
		v, err := b.store.read(ctx, b.store.items, req.SKU)
		if err != nil {
			return inventory.Sale{}, err
		}
		b.remember(req.SKU, v)
		if v.givenUp(o) {
			return inventory.Sale{}, abandoned("buckets decrement", o)
		}
		sale, done, err := b.round(ctx, o, v, r < bucketRounds/2)
		if done || err != nil {
			return sale, err
		}
	}
	return inventory.Sale{}, fmt.Errorf("%w: buckets of %q kept changing for %d rounds", inventory.ErrConflict, req.SKU, bucketRounds)
}

// round tries to sell o from what v shows. done is false when another
// writer changed the split first: the caller reads again. With reread, a
// round whose every bucket that covered qty was taken first by other sales
// reads again instead of merging.
func (b *Buckets) round(ctx context.Context, o inventory.Order, v *view, reread bool) (inventory.Sale, bool, error) {
	it := &v.item
	if it.Split == nil {
		switch {
		case it.Stock < o.Qty:
			// Not split: the item alone holds the stock, and this read of
			// one document is the moment it fell short.
			return inventory.Sale{}, true, soldOut(o.SKU, it.Stock, o.Qty)
		case it.Stock < int64(2*b.kOf(v)):
			// Too little to split: sell from the item, as atomic does.
			sale, took, err := b.takeItem(ctx, o)
			return sale, took || err != nil, err
		}
		after, err := b.spread(ctx, v)
		if after == nil {
			return inventory.Sale{}, false, err // another writer first: read again
		}
		// Split. A bucket it could not write is fresh in after, and
		// written below before a take from it.
		b.remember(o.SKU, after)
		v, it = after, &after.item // sell from the split it made, with no read
	}
	frozen, tried := false, 0
	order := rand.Perm(len(v.buckets))
	for _, i := range order {
		st := v.state(i)
		frozen = frozen || st == bucketFrozen
		if st == bucketFrozen || st == bucketDead || v.units(i) < o.Qty {
			continue
		}
		if st == bucketFresh {
			if err := b.store.materialize(ctx, v, i, it.Split.Gen); err != nil {
				return inventory.Sale{}, false, err
			}
		}
		tried++
		sale, took, err := b.take(ctx, o, bucketID(o.SKU, i), it.Split.Gen)
		if took || err != nil {
			return sale, true, err
		}
	}
	if !frozen && it.Stock >= o.Qty {
		// Stock the item holds beside its buckets (a restock).
		sale, took, err := b.takeItem(ctx, o)
		if took || err != nil {
			return sale, true, err
		}
	}
	if tried > 0 && !frozen && reread {
		return inventory.Sale{}, false, nil // other sales took them first
	}
	// No one document covers qty, a merge or PUT is under way, or the
	// buckets kept changing under these reads: merge, and sell from the
	// total.
	return b.store.merge(ctx, o, it.Split.Gen)
}

// kOf is the bucket count of v's item: its own once split, else b's.
func (b *Buckets) kOf(v *view) int {
	if v.item.Buckets > 0 {
		return v.item.Buckets
	}
	return b.k
}

// take sells o from bucket id at generation gen. took is false, with no
// error, when the bucket could not: another generation, too little stock,
// no such bucket yet, or o's attempt given up (the caller's next read
// says so).
func (b *Buckets) take(ctx context.Context, o inventory.Order, id string, gen int64) (inventory.Sale, bool, error) {
	_, ok, err := b.store.writeOnce(ctx, sale{op: "buckets decrement", sku: o.SKU, doc: id, orders: []inventory.Order{o}, qty: o.Qty,
		conds: []cond{genIs(gen)}, blind: true})
	if !ok {
		return inventory.Sale{}, false, err
	}
	// The bucket's remaining stock is not the sku's: the total it left is
	// not known at the write, so the sale reports none.
	return b.store.soldIn(ctx, id, o, -1, 1, stepTimer{}), true, nil
}

// takeItem sells o from the item's own stock, as atomic does. The item's
// own stock counts in the sku's total whether it is split or not, so the
// take needs no other condition; a merge's write, conditional on the
// item's version, then reads again.
func (b *Buckets) takeItem(ctx context.Context, o inventory.Order) (inventory.Sale, bool, error) {
	it, ok, err := b.store.writeOnce(ctx, sale{op: "buckets decrement", sku: o.SKU, orders: []inventory.Order{o}, qty: o.Qty})
	if !ok {
		return inventory.Sale{}, false, err
	}
	remaining := int64(-1)
	if it.Split == nil {
		remaining = it.Stock // the item holds all of the sku's stock
	}
	return b.store.sold(ctx, o, remaining, 1), true, nil
}

// remember caches the split v shows of sku, or forgets it.
func (b *Buckets) remember(sku string, v *view) {
	if v.item.Split == nil {
		b.splits.Delete(sku)
		return
	}
	b.splits.Store(sku, cachedSplit{gen: v.item.Split.Gen, k: len(v.buckets)})
}
