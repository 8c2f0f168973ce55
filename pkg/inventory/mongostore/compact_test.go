package mongostore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stocklock/stocklock/internal/testskip"
	"github.com/stocklock/stocklock/pkg/inventory"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// leaveAttempts stands for n keyed requests of s on sku that reserved
// their key and returned without settling it (their outcome unknown):
// their attempts and keys are stored, and none is in flight, so that s's
// next RecoverKeys gives each up through settle. It returns their order
// ids.
func leaveAttempts(t testing.TB, s *Store, sku string, n int) []string {
	t.Helper()
	ids, err := leftAttempts(t.Context(), s, sku, n)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// recoverUntil runs s's key recovery until it has given up want attempts
// in all (or 200 passes): an attempt is given up once the store's clock,
// by its lower estimate, is AbandonAfter past the attempt's stamp, and on
// a loaded machine the estimate's width can be longer than the time since
// the attempt began. It returns the passes' sums.
func recoverUntil(ctx context.Context, s *Store, want int) (KeyRecovery, error) {
	var sum KeyRecovery
	for range 200 {
		r, err := s.RecoverKeys(ctx)
		sum.Expired, sum.Settled, sum.Abandoned, sum.Compacted = sum.Expired+r.Expired, sum.Settled+r.Settled, sum.Abandoned+r.Abandoned, sum.Compacted+r.Compacted
		if err != nil || sum.Abandoned >= want {
			return sum, err
		}
		time.Sleep(5 * time.Millisecond)
	}
	return sum, nil
}

// leftAttempts is leaveAttempts for a goroutine of a test.
func leftAttempts(ctx context.Context, s *Store, sku string, n int) ([]string, error) {
	ids := make([]string, n)
	atts, keys := make([]any, n), make([]any, n)
	for i := range n {
		req := inventory.Request{SKU: sku, Qty: 1, Key: fmt.Sprintf("gone-%s", newOrderID())}
		rec, err := s.newKeyRecord(ctx, req, fingerprint(req, ""))
		if err != nil {
			return nil, err
		}
		ids[i] = rec.OrderID
		atts[i] = attempt{OrderID: rec.OrderID, KeyID: rec.ID, At: rec.At, Instance: s.instance}
		keys[i] = rec
	}
	if _, err := s.attempts.InsertMany(ctx, atts); err != nil {
		return nil, err
	}
	if _, err := s.keys.InsertMany(ctx, keys); err != nil {
		return nil, err
	}
	return ids, nil
}

// itemBytes returns the size of sku's item document, as stored.
func itemBytes(t testing.TB, s *Store, sku string) int {
	t.Helper()
	raw, err := s.items.FindOne(t.Context(), bson.D{{Key: "_id", Value: sku}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	return len(raw)
}

// TestGiveUpsKeepTheItemSmall: every attempt given up fences its order id
// out of the item, and the item must not grow with them. After 300 give-ups
// in six recovery passes the item holds no aborted entry and stays the size
// it had, while every given-up order is still refused by every kind of
// stock write. A live attempt with a lower order id, open meanwhile, keeps
// the fences above it in place and is not refused; once it has sold, the
// next pass compacts them. (AbandonAfter is a millisecond, so that the
// fences are old enough to move at once; see TestYoungFencesStay.)
func TestGiveUpsKeepTheItemSmall(t *testing.T) {
	// TestKeyNotSoldTwiceAcrossCompaction and TestYoungFencesStay keep
	// compaction in the quick tier.
	testskip.Long(t, "gives up 300 attempts in six recovery passes and tries each kind of stock write on them")
	s := replicaStore(t, testStore(t), StoreOptions{Replica: "r", AbandonAfter: time.Millisecond})
	ctx := t.Context()
	const sku = "hot"
	mustPut(t, s, sku, 1000)
	if _, err := s.RecoverKeys(ctx); err != nil { // settles nothing: sets nothing on the item
		t.Fatal(err)
	}
	before := itemBytes(t, s, sku)

	var gone []string
	for range 6 {
		gone = append(gone, leaveAttempts(t, s, sku, 50)...)
		got, err := s.RecoverKeys(ctx)
		if err != nil || got.Abandoned != 50 {
			t.Fatalf("recovery: %+v, %v; want 50 attempts given up", got, err)
		}
	}
	it := mustGet(t, s, sku)
	if size := itemBytes(t, s, sku); len(it.Aborted) != 0 || size > before+128 {
		t.Fatalf("after %d give-ups the item holds %d aborted entries and is %d bytes (%d before): want none, and at most 128 bytes more (aborted_through, an empty aborted)",
			len(gone), len(it.Aborted), size, before)
	}

	// Late writes of given-up orders, the first and the last, by every kind
	// of stock write: each refused, nothing sold.
	locks := newLockServices(t)
	for _, st := range keyedStrategies(t, s, locks) {
		for _, id := range []string{gone[0], gone[len(gone)-1]} {
			req := inventory.Request{SKU: sku, Qty: 1, OrderID: id, Key: "late"}
			if sale, err := st.Decrement(ctx, req); !errors.Is(err, inventory.ErrAbandoned) {
				t.Errorf("%s: late write of given-up order %s: %+v, %v; want inventory.ErrAbandoned", st.Name(), id, sale, err)
			}
		}
	}
	if it, n := mustGet(t, s, sku), mustCount(t, s, sku); it.Stock != 1000 || n != 0 {
		t.Fatalf("stock %d, orders %d: want 1000 and 0", it.Stock, n)
	}

	// A live attempt below later give-ups: paused before its stock write.
	h := hold(NewAtomic(s))
	type result struct {
		sale inventory.Sale
		err  error
	}
	live := make(chan result, 1)
	go func() {
		sale, _, err := s.DecrementOnce(ctx, h, inventory.Request{SKU: sku, Qty: 1, Key: "live"}, "")
		live <- result{sale, err}
	}()
	<-h.reached
	above := leaveAttempts(t, s, sku, 20)
	if got, err := s.RecoverKeys(ctx); err != nil || got.Abandoned != 20 {
		t.Fatalf("recovery with a live attempt: %+v, %v; want 20 given up", got, err)
	}
	if it := mustGet(t, s, sku); len(it.Aborted) != 20 {
		t.Fatalf("aborted = %d entries with a live attempt below them; want the 20 kept", len(it.Aborted))
	}
	close(h.release)
	if r := <-live; r.err != nil || r.sale.Remaining != 999 {
		t.Fatalf("the live attempt: %+v, %v; want its sale, not refused", r.sale, r.err)
	}
	if _, err := s.RecoverKeys(ctx); err != nil {
		t.Fatal(err)
	}
	if it := mustGet(t, s, sku); len(it.Aborted) != 0 {
		t.Fatalf("aborted = %d entries once the live attempt sold; want them compacted", len(it.Aborted))
	}
	req := inventory.Request{SKU: sku, Qty: 1, OrderID: above[len(above)-1], Key: "late"}
	if _, err := NewAtomic(s).Decrement(ctx, req); !errors.Is(err, inventory.ErrAbandoned) {
		t.Fatalf("late write of a compacted order: %v; want inventory.ErrAbandoned", err)
	}
	if it, n := mustGet(t, s, sku), mustCount(t, s, sku); it.Stock != 999 || n != 1 {
		t.Fatalf("stock %d, orders %d: want 999 and 1, the live attempt's sale only", it.Stock, n)
	}
}

// TestYoungFencesStay: concurrent requests insert their attempts in
// another order than they minted their order ids, so an attempt minted
// before others may be inserted after they were given up. The fences of
// attempts minted within AbandonAfter stay in the item, and such an
// attempt sells.
func TestYoungFencesStay(t *testing.T) {
	s := replicaStore(t, testStore(t), StoreOptions{Replica: "r", AbandonAfter: time.Hour})
	ctx := t.Context()
	const sku = "young"
	mustPut(t, s, sku, 10)
	req := inventory.Request{SKU: sku, Qty: 1, Key: "minted-first"}
	rec, err := s.newKeyRecord(t.Context(), req, fingerprint(req, ""))
	if err != nil {
		t.Fatal(err)
	}
	leaveAttempts(t, s, sku, 20)
	if got, err := s.RecoverKeys(ctx); err != nil || got.Abandoned != 20 {
		t.Fatalf("recovery: %+v, %v; want 20 given up", got, err)
	}
	if err := s.beginAttempt(ctx, rec); err != nil {
		t.Fatal(err)
	}
	defer s.inFlight.remove(rec.OrderID)
	if _, err := s.keys.InsertOne(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if sale, _, err := s.decrementReserved(ctx, NewAtomic(s), req, rec); err != nil || sale.Remaining != 9 {
		t.Fatalf("the attempt minted before the give-ups: %+v, %v; want its sale", sale, err)
	}
	if it := mustGet(t, s, sku); len(it.Aborted) != 20 {
		t.Fatalf("aborted = %d entries, want the 20 young ones kept", len(it.Aborted))
	}
}

// BenchmarkGiveUps gives up b.N keyed attempts of one item through settle,
// in recovery passes of 100 (as RecoverKeys does every
// --recovery-interval), and reports the item's size after them: item-B.
// AbandonAfter is a millisecond, so that every fence is old enough to be
// compacted in the pass that set it: the item's size is what the fences
// given up within AbandonAfter add to it (docs/every-writer.md has the
// figures).
//
//	go test -run '^$' -bench BenchmarkGiveUps -benchtime 10000x ./pkg/inventory/mongostore/
func BenchmarkGiveUps(b *testing.B) {
	s, err := NewStore(testDB(b), StoreOptions{Replica: "r", AbandonAfter: time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.EnsureIndexes(b.Context()); err != nil {
		b.Fatal(err)
	}
	const sku = "hot"
	mustPut(b, s, sku, 1)
	for done := 0; done < b.N; {
		n, pass := min(100, b.N-done), time.Now()
		leaveAttempts(b, s, sku, n)
		got, err := s.RecoverKeys(b.Context())
		if err != nil || got.Abandoned != n {
			b.Fatalf("recovery: %+v, %v; want %d given up", got, err, n)
		}
		done += n
		// A long run says how far it got, and whether a pass slows
		// down as the given-up keys pile up.
		if b.N >= 10_000 && done%(b.N/10) < n {
			fmt.Fprintf(os.Stderr, "BenchmarkGiveUps: %d of %d given up, item %d B, last pass %s, %s in\n",
				done, b.N, itemBytes(b, s, sku), time.Since(pass).Round(time.Millisecond), b.Elapsed().Round(time.Second))
		}
	}
	b.ReportMetric(float64(itemBytes(b, s, sku)), "item-B")
	b.ReportMetric(float64(len(mustGet(b, s, sku).Aborted)), "aborted-entries")
}
