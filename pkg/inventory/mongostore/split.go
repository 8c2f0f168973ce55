package mongostore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// bucketSep separates a sku from its bucket number in a bucket's _id; no
// sku contains it (inventory.ValidSKU).
const bucketSep = "#"

// split is the item's record of its stock being split across buckets,
// set by a spread and removed by a merge or a PUT:
//
//	split: {gen: NumberLong, base: NumberLong}
//
// A bucket at gen counts its own stock; a bucket at gen+1 is frozen by a
// merge or PUT in progress and counts its stock too, but takes no sale; a
// bucket below gen, or missing, has not been materialized yet and counts
// share(base, k, i), which its materialization writes.
type split struct {
	Gen  int64 `bson:"gen"`
	Base int64 `bson:"base"`
}

// bucketDoc is one bucket, a document in the items collection:
//
//	{_id: "<sku>#<i>", sku, gen, stock, version, pending: {<order id>: order}, aborted: {<order id>: date}, aborted_through}
//
// pending, aborted and aborted_through mean what they mean in an item: a take records its
// order as pending in the same update, and no take of an aborted order id
// is accepted.
type bucketDoc struct {
	ID      string                     `bson:"_id"`
	SKU     string                     `bson:"sku"`
	Gen     *int64                     `bson:"gen"`
	Stock   int64                      `bson:"stock"`
	Version int64                      `bson:"version"`
	Pending map[string]inventory.Order `bson:"pending,omitempty"`
	Aborted map[string]time.Time       `bson:"aborted,omitempty"`
	// AbortedThrough gives up every keyed order id up to it, as the
	// item's does: a bucket takes the item's when it is written, and
	// compactAborted raises it as it moves the bucket's fences into it.
	AbortedThrough string `bson:"aborted_through,omitempty"`
}

// gaveUp is gaveUp of the bucket: o's attempt is fenced in it.
func (b bucketDoc) gaveUp(o inventory.Order) bool {
	return gaveUp(itemDoc{Aborted: b.Aborted, AbortedThrough: b.AbortedThrough}, o)
}

// bucketID is the _id of sku's bucket i.
func bucketID(sku string, i int) string { return sku + bucketSep + strconv.Itoa(i) }

// skuOfDoc returns the sku of an items document: its _id, up to the
// bucket separator for a bucket.
func skuOfDoc(id string) string {
	sku, _, _ := strings.Cut(id, bucketSep)
	return sku
}

// share is bucket i's part of base units spread over k buckets.
func share(base int64, k, i int) int64 {
	s := base / int64(k)
	if int64(i) < base%int64(k) {
		s++
	}
	return s
}

// view is one read of an item and its buckets, in one find.
type view struct {
	item    itemDoc
	buckets []bucketDoc // by number; a missing bucket has a nil Gen
}

// state of bucket i as this view counts it.
const (
	bucketLive   = iota // at the split's generation: takes sales
	bucketFresh         // below it, or missing: counts its share, not yet materialized
	bucketFrozen        // one above it: frozen by a merge or PUT in progress
	bucketDead          // any other generation: counts nothing (only under an unsplit item)
)

func (v *view) state(i int) int {
	sp, b := v.item.Split, v.buckets[i]
	switch {
	case sp == nil:
		return bucketDead
	case b.Gen == nil || *b.Gen < sp.Gen:
		return bucketFresh
	case *b.Gen == sp.Gen:
		return bucketLive
	case *b.Gen == sp.Gen+1:
		return bucketFrozen
	}
	return bucketDead
}

// units is what bucket i holds as the view counts it.
func (v *view) units(i int) int64 {
	switch v.state(i) {
	case bucketLive, bucketFrozen:
		return v.buckets[i].Stock
	case bucketFresh:
		return share(v.item.Split.Base, len(v.buckets), i)
	}
	return 0
}

// total is the sku's stock: the item's own and its buckets'.
func (v *view) total() int64 {
	t := v.item.Stock
	for i := range v.buckets {
		t += v.units(i)
	}
	return t
}

// version is the sku's version: the item's plus that of every bucket that
// counts its own stock. Every write that changes what the view counts
// raises it, and a merge sets the item's past it, so it never repeats.
func (v *view) version() int64 {
	n := v.item.Version
	for i, b := range v.buckets {
		if s := v.state(i); s == bucketLive || s == bucketFrozen {
			n += b.Version
		}
	}
	return n
}

// givenUp reports whether recovery has begun to give order id up: its
// fence is in the item or in a bucket (settle fences the buckets first).
// Nothing of id was sold where the view looked, so refusing it now is
// safe; settle then finds no sale, or one that landed before.
func (v *view) givenUp(o inventory.Order) bool {
	return gaveUp(v.item, o) || slices.ContainsFunc(v.buckets, func(b bucketDoc) bool { return b.gaveUp(o) })
}

// refuses reports whether every document of v refuses every stock write
// of o (notAborted): the item, and each of its buckets, every one of which
// must exist (a bucket written later copies its fences from a read of the
// item that may be older). A document refuses o from then on: a fence
// leaves it only in the write that raises its aborted_through over it, and
// aborted_through never goes down. So no write of o can land anywhere
// after v, whoever sends it.
func (v *view) refuses(o inventory.Order) bool {
	return gaveUp(v.item, o) && !slices.ContainsFunc(v.buckets, func(b bucketDoc) bool { return b.ID == "" || !b.gaveUp(o) })
}

// fencedDoc is a document of a sku, the item or a bucket, with the
// aborted fences it holds.
type fencedDoc struct {
	id      string
	aborted map[string]time.Time
}

// fenced returns the item and every bucket that holds an aborted fence,
// the item first, for compactAborted; nil when no document holds any.
func (v *view) fenced() []fencedDoc {
	docs := []fencedDoc{{id: v.item.SKU, aborted: v.item.Aborted}}
	for _, b := range v.buckets {
		if len(b.Aborted) > 0 {
			docs = append(docs, fencedDoc{id: b.ID, aborted: b.Aborted})
		}
	}
	if len(docs) == 1 && len(v.item.Aborted) == 0 {
		return nil
	}
	return docs
}

// Snapshot returns the item as clients see it: with its stock summed over
// its buckets (see Buckets), its version the sum of theirs, and the
// orders pending in any of them. For an item never split it is Get.
func (s *Store) Snapshot(ctx context.Context, sku string) (inventory.Item, error) {
	it, err := s.snapshot(ctx, sku)
	return it.item(), err
}

// snapshot is Snapshot as the item document.
func (s *Store) snapshot(ctx context.Context, sku string) (itemDoc, error) {
	if err := inventory.CheckSKU(sku); err != nil {
		return itemDoc{}, err
	}
	v, err := s.read(ctx, s.items, sku)
	if err != nil {
		return itemDoc{}, err
	}
	return v.merged(), nil
}

// read returns the item and its buckets, ErrNotFound without the item.
//
// Each document by its own _id: MongoDB answers one find with
// {_id: {$in: ...}} from its _id index, but FerretDB v1 hands only
// equality to PostgreSQL and answers $in by fetching and decoding every
// document of the collection itself, a cost that grows with every sku the
// store holds, and every GET of every strategy reads here
// (docs/embedded-store.md#cost-that-does-not-grow-with-retained-data). The buckets are read at once,
// between two reads of the item, and the view is kept only when the item
// did not change in between: then every bucket's state is counted against
// the split it was read under, each bucket as of its own read, and a GET
// sees what some order of the sales it overlapped left. A spread, merge,
// restock or PUT moves the item's version, and the view is read again.
func (s *Store) read(ctx context.Context, items *mongo.Collection, sku string) (*view, error) {
	v := &view{}
	if err := findByID(ctx, items, sku, &v.item); err != nil {
		return nil, notFound(sku, err)
	}
	for v.item.Buckets > 0 {
		if s.afterItemRead != nil {
			s.afterItemRead()
		}
		v.buckets = make([]bucketDoc, v.item.Buckets)
		errs := make([]error, len(v.buckets))
		var wg sync.WaitGroup
		for i := range v.buckets {
			wg.Go(func() {
				// A missing bucket stays zero: nil Gen.
				if err := findByID(ctx, items, bucketID(sku, i), &v.buckets[i]); !errors.Is(err, mongo.ErrNoDocuments) {
					errs[i] = err
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		var again itemDoc
		if err := findByID(ctx, items, sku, &again); err != nil {
			return nil, notFound(sku, err)
		}
		if again.Version == v.item.Version {
			return v, nil
		}
		v.item = again
	}
	return v, nil
}

// notFound is err, or ErrNotFound for sku when err says there is no such
// document.
func notFound(sku string, err error) error {
	if errors.Is(err, mongo.ErrNoDocuments) {
		return fmt.Errorf("%w: get %q", inventory.ErrNotFound, sku)
	}
	return err
}

// findByID decodes the document with _id id into out: mongo.ErrNoDocuments
// when there is none.
func findByID(ctx context.Context, items *mongo.Collection, id string, out any) error {
	raw, err := items.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return err
	}
	if err != nil {
		return unreachable("read", id, err)
	}
	if err := bson.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("inventory: decode %q: %w", id, err)
	}
	return nil
}

// merged is the view as one item.
func (v *view) merged() itemDoc {
	it := v.item
	it.Stock, it.Version = v.total(), v.version()
	for _, b := range v.buckets {
		if it.Pending == nil && len(b.Pending) > 0 {
			it.Pending = map[string]inventory.Order{}
		}
		maps.Copy(it.Pending, b.Pending)
	}
	return it
}

// pendingInBuckets returns the order id pending in one of sku's buckets,
// and the bucket's _id, read with the given collection's read concern.
func (s *Store) pendingInBuckets(ctx context.Context, items *mongo.Collection, sku, id string) (inventory.Order, string, bool, error) {
	v, err := s.read(ctx, items, sku)
	if err != nil {
		return inventory.Order{}, "", false, err
	}
	for _, b := range v.buckets {
		if o, ok := b.Pending[id]; ok {
			return o, b.ID, true, nil
		}
	}
	return inventory.Order{}, "", false, nil
}

// PutSplit is Put with the stock already split across k buckets (1 to
// MaxBuckets; an item split before keeps its count), so that no sale pays
// the split: one write of the item sets the stock as the shares of a new
// split generation, exactly as a spread of it would, and the buckets are
// then written at once, before it returns. A stock under 2k, which the
// buckets strategy would sell from the item, is put unsplit (Put).
//
// An item that is split already is put as putSplit puts it (every bucket
// frozen first, so that no sale of the old stock lands after it), but its
// one write of the item starts a new split instead of ending the split.
// An item that is not, or a new one, is written on the version read (on
// its absence for a new one), so that a sale in between makes it read
// again.
func (s *Store) PutSplit(ctx context.Context, sku string, stock int64, k int) (inventory.Item, error) {
	if err := inventory.CheckSKU(sku); err != nil {
		return inventory.Item{}, err
	}
	if stock < 0 {
		return inventory.Item{}, fmt.Errorf("%w: stock %d must not be negative", inventory.ErrInvalid, stock)
	}
	if k < 1 || k > MaxBuckets {
		return inventory.Item{}, fmt.Errorf("%w: %d buckets: want 1 to %d", inventory.ErrInvalid, k, MaxBuckets)
	}
	for range bucketRounds {
		v, err := s.read(ctx, s.items, sku)
		if err != nil && !errors.Is(err, inventory.ErrNotFound) {
			return inventory.Item{}, err
		}
		if v != nil && v.item.Buckets > 0 {
			k = v.item.Buckets
		}
		if stock < int64(2*k) {
			return s.Put(ctx, sku, stock)
		}
		var after *view
		switch {
		case v == nil:
			after, err = s.insertSplit(ctx, sku, stock, k)
		case v.item.Split == nil:
			after, err = s.writeSplit(ctx, v, k, stock)
		default:
			var ok bool
			if v, ok, err = s.frozenView(ctx, sku, v.item.Split.Gen); ok {
				after, err = s.writeSplit(ctx, v, k, stock)
			}
		}
		if after != nil {
			if err != nil {
				// Put: the buckets not written count their shares, and
				// the first sale that picks one writes it.
				s.logger.WarnContext(ctx, "put split: a bucket not written yet", slog.String("sku", sku), slog.Any("error", err))
			}
			return after.merged().item(), nil
		}
		if err != nil {
			return inventory.Item{}, err
		}
	}
	return inventory.Item{}, fmt.Errorf("%w: put %q split: it kept changing", inventory.ErrStoreUnavailable, sku)
}

// spread splits v's item, which is not split: one write of the item moves
// its stock to its buckets at a new generation, as shares each bucket
// takes up when first written (materialize). The item's total is the same
// before and after, and nothing is in transit between documents. It
// returns the view of the new split, with every bucket it materialized
// live, or nil when another writer changed the item first.
func (b *Buckets) spread(ctx context.Context, v *view) (*view, error) {
	return b.store.writeSplit(ctx, v, b.kOf(v), v.item.Stock)
}

// insertSplit creates sku's item split across k buckets at generation 1,
// and writes them: a new item has no bucket of any generation (an item is
// never deleted, and only its split writes buckets). nil when the item
// exists by now.
func (s *Store) insertSplit(ctx context.Context, sku string, stock int64, k int) (*view, error) {
	it := itemDoc{
		SKU: sku, Version: 1, Fences: map[string]int64{},
		Split: &split{Gen: 1, Base: stock}, Buckets: k, LastGen: 1,
	}
	cctx, cancel := s.commitContext(ctx)
	defer cancel()
	_, err := s.items.InsertOne(cctx, bson.D{
		{Key: "_id", Value: sku}, {Key: "stock", Value: int64(0)}, {Key: "version", Value: it.Version}, {Key: "fences", Value: bson.D{}},
		{Key: "split", Value: *it.Split}, {Key: "buckets", Value: k}, {Key: "last_gen", Value: it.LastGen},
	})
	if mongo.IsDuplicateKeyError(err) {
		return nil, nil
	}
	if err != nil {
		return nil, unknownOutcome("put", sku, err)
	}
	// No attempt of sku was given up before it existed (settle leaves
	// those alone), and one given up since is fenced in every bucket.
	return s.materializeAll(ctx, it, k)
}

// writeSplit splits the stock of v's item anew: base units over k
// buckets, at a generation above every bucket's. The item is not split,
// or split with every bucket frozen (frozenView); one write of the item,
// conditional on its version and its split as v read them, sets the new
// split, and every bucket is then materialized at once (different
// documents), from the item as that write left it: a bucket must copy
// every order id given up in the item before the split, and one given up
// between a read and the write is in the item only (settle's fence of an
// unsplit item does not move its version); one given up after it is
// fenced in every bucket by settle. It returns the view of the new split,
// every bucket materialized here live at its share, or nil when the item
// changed since v. A bucket that could not be written counts its share
// all the same, and the first sale that picks it writes it.
func (s *Store) writeSplit(ctx context.Context, v *view, k int, base int64) (*view, error) {
	sku := v.item.SKU
	filter := bson.D{{Key: "_id", Value: sku}, {Key: "version", Value: v.item.Version}, {Key: "split", Value: bson.D{{Key: "$exists", Value: false}}}}
	gen := v.item.LastGen + 1
	if sp := v.item.Split; sp != nil {
		// Every bucket is frozen at split.gen+1: a generation above that
		// makes each fresh, counting its share of base.
		filter[2] = bson.E{Key: "split.gen", Value: sp.Gen}
		gen = max(v.item.LastGen, sp.Gen+1) + 1
	}
	update := bson.D{{Key: "$set", Value: bson.D{
		{Key: "stock", Value: int64(0)}, {Key: "split", Value: split{Gen: gen, Base: base}},
		{Key: "buckets", Value: k}, {Key: "last_gen", Value: gen}, {Key: "version", Value: v.version() + 1},
	}}}
	cctx, cancel := s.commitContext(ctx)
	defer cancel()
	var it itemDoc
	err := s.items.FindOneAndUpdate(cctx, filter, update, options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&it)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		// Whether or not it landed, the total is the same: read again.
		return nil, unreachable("split the stock of", sku, err)
	}
	return s.materializeAll(ctx, it, k)
}

// materializeAll writes every bucket of it, just split, at once, and
// returns the view of the split with each bucket written live at its
// share (or less: sold from since), the others fresh.
func (s *Store) materializeAll(ctx context.Context, it itemDoc, k int) (*view, error) {
	after := &view{item: it, buckets: make([]bucketDoc, k)}
	gen := it.Split.Gen
	var (
		wg   sync.WaitGroup
		errs = make([]error, k)
	)
	for i := range k {
		wg.Go(func() { errs[i] = s.materialize(ctx, after, i, gen) })
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil {
			after.buckets[i] = bucketDoc{ID: bucketID(it.SKU, i), SKU: it.SKU, Gen: &gen, Stock: share(it.Split.Base, k, i)}
		}
	}
	return after, errors.Join(errs...)
}

// materialize writes bucket i's share of v's split into it at generation
// gen (the split's, or one above: frozen), if it is still below the
// split's generation (or missing), with the item's aborted order ids: a
// bucket written after an attempt was given up refuses it too. A bucket
// already at or past it is left alone. Its count does not change: the
// view counted the share already; and its version starts at 0, so that
// the sku's version (view.version) does not move.
func (s *Store) materialize(ctx context.Context, v *view, i int, gen int64) error {
	sku, sp := v.item.SKU, v.item.Split
	set := bson.D{{Key: "sku", Value: sku}, {Key: "gen", Value: gen}, {Key: "stock", Value: share(sp.Base, len(v.buckets), i)}, {Key: "version", Value: int64(0)}}
	for id, at := range v.item.Aborted {
		set = append(set, bson.E{Key: abortedPath(id), Value: at})
	}
	update := bson.D{{Key: "$set", Value: set}}
	if v.item.AbortedThrough != "" {
		// The item's fences compacted into aborted_through (see
		// compactAborted) are no longer in Aborted: the bucket takes the
		// bound too, and never lowers one it has.
		update = append(update, bson.E{Key: "$max", Value: bson.D{{Key: abortedThrough, Value: v.item.AbortedThrough}}})
	}
	cctx, cancel := s.commitContext(ctx)
	defer cancel()
	_, err := s.items.UpdateOne(cctx,
		bson.D{{Key: "_id", Value: bucketID(sku, i)}, {Key: "$or", Value: bson.A{
			bson.D{{Key: "gen", Value: bson.D{{Key: "$lt", Value: sp.Gen}}}},
			bson.D{{Key: "gen", Value: bson.D{{Key: "$exists", Value: false}}}},
		}}},
		update,
		options.UpdateOne().SetUpsert(true))
	if err != nil && !mongo.IsDuplicateKeyError(err) {
		// A duplicate key is a bucket at or past the generation: done.
		return unreachable("write bucket of", sku, err)
	}
	return nil
}

// merge sells o from the whole of split generation gen: it freezes every
// bucket, reads the exact total, and unsplits the item taking o's qty from
// it, or answers sold out when the total, exact at that read, is short
// (then it still unsplits, with the total, so that the next sale reads
// one document). done is false when another writer ended the split first.
func (s *Store) merge(ctx context.Context, o inventory.Order, gen int64) (inventory.Sale, bool, error) {
	v, ok, err := s.frozenView(ctx, o.SKU, gen)
	if err != nil || !ok {
		return inventory.Sale{}, false, err
	}
	if gaveUp(v.item, o) {
		return inventory.Sale{}, true, abandoned("buckets decrement", o)
	}
	total := v.total()
	// Short, the units of holds expired by the store's clock may cover
	// it, as they do a sale of the item's own stock (sale.go): the
	// unsplit returns them in the same write.
	var expired []string
	var back int64
	if total < o.Qty {
		if expired, back, err = s.expiredOf(ctx, v.item); err != nil {
			return inventory.Sale{}, true, err
		}
	}
	if total+back < o.Qty {
		if _, _, err := s.unsplit(ctx, v, total, nil); err != nil {
			return inventory.Sale{}, true, err
		}
		// Exact whether or not the unsplit landed: frozen buckets take no
		// sale, and the item's own stock was read with them.
		return inventory.Sale{}, true, soldOut(o.SKU, total+back, o.Qty)
	}
	it, ok, err := s.unsplit(ctx, v, total+back-o.Qty, &o, expired...)
	if err != nil || !ok {
		return inventory.Sale{}, false, err
	}
	return s.sold(ctx, o, it.Stock, 1), true, nil
}

// mergeSplit ends split generation gen of sku with no sale: it freezes
// every bucket and unsplits the item with the exact total, so that the
// item holds all of the sku's stock. ok is false when another writer
// changed the item first: read again.
func (s *Store) mergeSplit(ctx context.Context, sku string, gen int64) (itemDoc, bool, error) {
	v, ok, err := s.frozenView(ctx, sku, gen)
	if err != nil || !ok {
		return itemDoc{}, false, err
	}
	return s.unsplit(ctx, v, v.total(), nil)
}

// putSplit is Put (or PutIf, with version) of an item that is split: it
// freezes the buckets and sets the stock in the same write that unsplits
// the item. ok is false when the item is not split (any more): put the
// item itself.
func (s *Store) putSplit(ctx context.Context, sku string, stock int64, version *int64) (itemDoc, bool, error) {
	for range bucketRounds {
		v, err := s.read(ctx, s.items, sku)
		if err != nil {
			return itemDoc{}, false, err
		}
		if v.item.Split == nil {
			return itemDoc{}, false, nil
		}
		fv, ok, err := s.frozenView(ctx, sku, v.item.Split.Gen)
		if err != nil {
			return itemDoc{}, false, err
		}
		if !ok {
			continue
		}
		if version != nil && fv.version() != *version {
			return itemDoc{}, true, fmt.Errorf("%w: put %q at version %d (version now %d)", inventory.ErrStale, sku, *version, fv.version())
		}
		it, ok, err := s.unsplit(ctx, fv, stock, nil)
		if err != nil {
			return itemDoc{}, true, err
		}
		if ok {
			return it, true, nil
		}
	}
	return itemDoc{}, true, fmt.Errorf("%w: put %q: its buckets kept changing", inventory.ErrStoreUnavailable, sku)
}

// frozenView freezes the buckets of sku's split generation gen and reads
// them back, all frozen. ok is false when the item is no longer split at
// gen: another merge or PUT finished first.
func (s *Store) frozenView(ctx context.Context, sku string, gen int64) (*view, bool, error) {
	for range bucketRounds {
		v, err := s.read(ctx, s.items, sku)
		if err != nil {
			return nil, false, err
		}
		if v.item.Split == nil || v.item.Split.Gen != gen {
			return v, false, nil
		}
		all := true
		for i := range v.buckets {
			if st := v.state(i); st != bucketFrozen && st != bucketDead {
				all = false
			}
		}
		if all {
			return v, true, nil
		}
		if err := s.freeze(ctx, v); err != nil {
			return nil, false, err
		}
	}
	return nil, false, fmt.Errorf("%w: freeze the buckets of %q: they kept changing", inventory.ErrStoreUnavailable, sku)
}

// freeze moves every bucket of v's split to the frozen generation (one
// above the split's), keeping what each counts: a live bucket keeps its
// stock and version, a fresh one gets its share. A frozen bucket takes no
// sale, so once all are frozen the total no longer moves but by the item;
// and freezing moves neither the total nor the version, so that a PutIf
// at the version a client read still matches.
func (s *Store) freeze(ctx context.Context, v *view) error {
	sp := v.item.Split
	for i := range v.buckets {
		switch v.state(i) {
		case bucketFrozen, bucketDead:
			continue
		case bucketFresh:
			if err := s.materialize(ctx, v, i, sp.Gen+1); err != nil {
				return err
			}
			// A bucket materialized meanwhile is live: freeze it below.
		}
		cctx, cancel := s.commitContext(ctx)
		_, err := s.items.UpdateOne(cctx,
			bson.D{{Key: "_id", Value: bucketID(v.item.SKU, i)}, {Key: "gen", Value: sp.Gen}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "gen", Value: sp.Gen + 1}}}})
		cancel()
		if err != nil {
			return unreachable("freeze bucket of", v.item.SKU, err)
		}
	}
	return nil
}

// unsplit ends split generation gen of v's item, all of whose buckets are
// frozen, in one write of the item conditional on its version: the item
// holds stock from then on, its buckets count nothing, and its version
// passes every version the view had. With o, the same write takes o's
// qty and records o as pending, and returns the units of the holds
// expired, expired in v by the store's clock (see expiredHolds), as a sale
// does: each still as v read it. ok is false when the item changed since
// v: nothing was written.
func (s *Store) unsplit(ctx context.Context, v *view, stock int64, o *inventory.Order, expired ...string) (itemDoc, bool, error) {
	sp := v.item.Split
	sl := sale{op: "buckets merge", sku: v.item.SKU, stock: &stock, read: &v.item,
		conds: []cond{versionIs("buckets merge", v.item.Version), splitIs(sp.Gen)},
		also:  bson.D{{Key: "version", Value: v.version() + 1}, {Key: "last_gen", Value: max(v.item.LastGen, sp.Gen+1)}},
		drop:  []string{"split"}}
	if o != nil {
		sl.orders, sl.qty = []inventory.Order{*o}, o.Qty
	}
	return s.writeOnce(ctx, sl, expired...)
}

// fenceBuckets gives order id up in every bucket of sku, before settle
// gives it up in the item: each bucket, existing or not yet, gets
// aborted.<id> unless the order is pending there. It returns the bucket
// where the order is pending, if one is: the sale happened. k is the
// item's bucket count as settle read it; settle's fence of the item is
// conditional on it, so that a split after this read makes settle look
// again (a bucket materialized later copies the item's aborted ids).
func (s *Store) fenceBuckets(ctx context.Context, sku, id string, k int, at time.Time) (string, error) {
	for i := range k {
		doc := bucketID(sku, i)
		_, err := s.items.UpdateOne(ctx,
			bson.D{{Key: "_id", Value: doc}, {Key: pendingPath(id), Value: bson.D{{Key: "$exists", Value: false}}}},
			bson.D{{Key: "$set", Value: bson.D{{Key: abortedPath(id), Value: at}}}},
			options.UpdateOne().SetUpsert(true))
		if mongo.IsDuplicateKeyError(err) {
			return doc, nil // pending there: the filter missed, the upsert met the bucket
		}
		if err != nil {
			return "", unreachable("give up idempotency attempt "+id+" in a bucket of", sku, err)
		}
	}
	return "", nil
}

// bucketCount returns how many buckets sku's item has (0: never split).
func (s *Store) bucketCount(ctx context.Context, items *mongo.Collection, sku string) (int, error) {
	var it itemDoc
	err := items.FindOne(ctx, bson.D{{Key: "_id", Value: sku}}).Decode(&it)
	if err != nil {
		return 0, err
	}
	return it.Buckets, nil
}
