package verdict

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stocklock/stocklock/pkg/strategy"
)

func orders(sku string, n int) []Order {
	out := make([]Order, n)
	for i := range out {
		out[i] = Order{ID: fmt.Sprintf("%s-%d", sku, i), SKU: sku, Qty: 1}
	}
	return out
}

func TestClassify(t *testing.T) {
	cases := []struct {
		code int
		err  string
		want Class
	}{
		{200, "", Sold},
		{409, "sold_out", SoldOut},
		{409, "conflict", Other},
		{503, "lock_unavailable", Unavailable},
		{503, "", Unavailable},
		{0, "", Transport},
		{201, "", Other}, // vegeta would call this a success; it is no sale
		{302, "", Other},
		{400, "bad_request", Other},
		{500, "", Other},
	}
	for _, c := range cases {
		if got := Classify(c.code, c.err); got != c.want {
			t.Errorf("Classify(%d, %q) = %v, want %v", c.code, c.err, got, c.want)
		}
	}
}

func TestCheckClean(t *testing.T) {
	acked := orders("a", 100)
	r := Audit(Input{
		Items:  []Item{{SKU: "a", Initial: 100, Remaining: 0}},
		Acked:  acked,
		Ledger: acked,
	})
	if r.Sold != 100 || r.Oversold != 0 || r.LostUpdates != 0 || r.LedgerMismatch != 0 || r.Anomalous() {
		t.Fatalf("clean sell-out judged anomalous: %+v", r)
	}
	if got := judge("atomic", r); got != Pass {
		t.Fatalf("Judge = %v, want pass", got)
	}
	if got := judge("unsafe", r); got != NotReproduced {
		t.Fatalf("Judge = %v, want not reproduced", got)
	}
}

func TestCheckLostUpdates(t *testing.T) {
	// The classic race: 60 acknowledged sales, but two read-modify-writes
	// overwrote each other 20 times, so the stock only went down by 40.
	acked := orders("a", 60)
	r := Audit(Input{
		Items:  []Item{{SKU: "a", Initial: 100, Remaining: 60}},
		Acked:  acked,
		Ledger: acked,
	})
	if r.LostUpdates != 20 || r.Oversold != 0 || r.Unacknowledged != 0 {
		t.Fatalf("got lost=%d oversold=%d unacked=%d, want 20/0/0", r.LostUpdates, r.Oversold, r.Unacknowledged)
	}
	if judge("redis-lock", r) != Fail || judge("local", r) != Demonstrated {
		t.Fatalf("verdicts: %v %v", judge("redis-lock", r), judge("local", r))
	}
	if Judge(append(checksOf("local", r), checksOf("atomic", Result{})...)) != Passed {
		t.Fatal("an unsafe strategy's anomaly must not fail the harness")
	}
	if Judge(checksOf("redis-lock", r)) != Failed {
		t.Fatal("a safe strategy's anomaly must fail the harness")
	}
}

func TestCheckOversold(t *testing.T) {
	acked := orders("a", 130)
	r := Audit(Input{
		Items:  []Item{{SKU: "a", Initial: 100, Remaining: 0}},
		Acked:  acked,
		Ledger: acked,
	})
	// 130 sold of 100: 30 oversold, and all 30 are also missing from the
	// stock (it went down by only 100).
	if r.Oversold != 30 || r.LostUpdates != 30 {
		t.Fatalf("oversold=%d lost=%d, want 30/30", r.Oversold, r.LostUpdates)
	}

	// Remaining below zero counts as oversold even when the responses
	// alone would not show it (here: 10 acknowledgements were lost).
	acked = orders("b", 95)
	r = Audit(Input{
		Items:  []Item{{SKU: "b", Initial: 100, Remaining: -5}},
		Acked:  acked,
		Ledger: acked,
	})
	if r.Oversold != 5 || r.LostUpdates != 0 || r.Unacknowledged != 10 {
		t.Fatalf("oversold=%d lost=%d unacked=%d, want 5/0/10", r.Oversold, r.LostUpdates, r.Unacknowledged)
	}
}

func TestCheckQtyAndManySKUs(t *testing.T) {
	var acked []Order
	for i := range 10 {
		acked = append(acked, Order{ID: fmt.Sprint("x", i), SKU: "x", Qty: 3})
	}
	for i := range 4 {
		acked = append(acked, Order{ID: fmt.Sprint("y", i), SKU: "y", Qty: 3})
	}
	r := Audit(Input{
		Items: []Item{
			{SKU: "x", Initial: 30, Remaining: 0},
			{SKU: "y", Initial: 30, Remaining: 21}, // 12 sold, stock shows 9
			{SKU: "z", Initial: 30, Remaining: 30},
		},
		Acked:  acked,
		Ledger: acked,
	})
	if r.Sold != 42 || r.Initial != 90 || r.Remaining != 51 || r.LostUpdates != 3 || r.Oversold != 0 {
		t.Fatalf("%+v", r)
	}
	if len(r.SKUs) != 3 || r.SKUs[1].Lost != 3 || r.SKUs[0].Lost != 0 {
		t.Fatalf("per-sku: %+v", r.SKUs)
	}
}

func TestLedger(t *testing.T) {
	acked := orders("a", 5)
	cases := []struct {
		name   string
		acked  []Order
		ledger []Order
		want   Ledger
	}{
		{"equal", acked, acked, Ledger{}},
		{"missing", acked, acked[:3], Ledger{Missing: 2}},
		{"extra", acked[:4], acked, Ledger{Extra: 1}},
		{"repeat in ledger", acked, append(append([]Order{}, acked...), acked[0]), Ledger{DuplicateLedger: 1}},
		{"repeat in responses", append(append([]Order{}, acked...), acked[1]), acked, Ledger{DuplicateAcked: 1}},
		{"no id", append(append([]Order{}, acked...), Order{SKU: "a", Qty: 1}), acked, Ledger{DuplicateAcked: 1}},
		{"qty differs", acked, append(append([]Order{}, acked[:4]...), Order{ID: acked[4].ID, SKU: "a", Qty: 2}), Ledger{Differ: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := CompareLedger(c.acked, c.ledger); got != c.want {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}

	// A ledger mismatch alone fails a safe strategy.
	r := Audit(Input{Items: []Item{{SKU: "a", Initial: 5, Remaining: 0}}, Acked: acked, Ledger: acked[:4]})
	if r.LedgerMismatch != 1 || judge("optimistic", r) != Fail || len(r.Problems) == 0 {
		t.Fatalf("%+v %v", r, judge("optimistic", r))
	}
}

func TestStraySKU(t *testing.T) {
	acked := []Order{{ID: "1", SKU: "other", Qty: 1}}
	r := Audit(Input{Items: []Item{{SKU: "a", Initial: 5, Remaining: 5}}, Acked: acked, Ledger: acked})
	if r.LedgerMismatch != 1 {
		t.Fatalf("a sale of an unknown sku must count: %+v", r)
	}
}

func TestSafeAll(t *testing.T) {
	for _, c := range []struct {
		mix  []string
		want bool
	}{
		{[]string{strategy.Atomic, strategy.MongoLease}, true},
		{[]string{strategy.Atomic, strategy.Local}, false},
		{[]string{"nope"}, false},
		{nil, false},
	} {
		if got := SafeAll(c.mix); got != c.want {
			t.Errorf("SafeAll(%v) = %v, want %v", c.mix, got, c.want)
		}
	}
}

// TestUnansweredSales: a replica killed after recording a sale and before
// answering leaves an order no 200 announced. As many extra orders as
// requests that got no answer are explained; one more is a mismatch.
func TestUnansweredSales(t *testing.T) {
	acked := orders("s", 5)
	ledger := append(orders("s", 5), Order{ID: "late-1", SKU: "s", Qty: 1}, Order{ID: "late-2", SKU: "s", Qty: 1})
	items := []Item{{SKU: "s", Initial: 10, Remaining: 3}}

	r := Audit(Input{Items: items, Acked: acked, Ledger: ledger, NoAnswer: map[string]int{"s": 2}})
	if r.Anomalous() || r.LedgerMismatch != 0 || r.Ledger.Unanswered != 2 || r.Unacknowledged != 2 {
		t.Errorf("two extra orders, two unanswered requests: %+v", r)
	}
	r = Audit(Input{Items: items, Acked: acked, Ledger: ledger, NoAnswer: map[string]int{"s": 1}})
	if !r.Anomalous() || r.LedgerMismatch != 1 || r.Ledger.Unanswered != 1 {
		t.Errorf("two extra orders, one unanswered request: mismatch %d, unanswered %d, want 1 and 1", r.LedgerMismatch, r.Ledger.Unanswered)
	}
	// Unanswered requests of another sku explain nothing here.
	r = Audit(Input{Items: items, Acked: acked, Ledger: ledger, NoAnswer: map[string]int{"other": 5}})
	if r.LedgerMismatch != 2 || r.Ledger.Unanswered != 0 {
		t.Errorf("extra orders of s, unanswered requests of another sku: mismatch %d, unanswered %d, want 2 and 0", r.LedgerMismatch, r.Ledger.Unanswered)
	}
	// Unanswered requests never excuse a missing order.
	r = Audit(Input{Items: items, Acked: append(acked, Order{ID: "ghost", SKU: "s", Qty: 1}), Ledger: orders("s", 5), NoAnswer: map[string]int{"s": 3}})
	if r.Ledger.Missing != 1 || r.LedgerMismatch != 1 {
		t.Errorf("an acknowledged order missing from the ledger: %+v", r.Ledger)
	}
}

// TestLostUpdateBehindUnacknowledgedSale: a replica killed between its
// stock write and its answer took a unit nobody was told about; a stale
// holder's clobber elsewhere gave one back. The acknowledged sales match
// the stock, but the ledger records more sales than the stock reflects.
func TestLostUpdateBehindUnacknowledgedSale(t *testing.T) {
	acked := orders("s", 4)                                            // 4 sales answered 200
	ledger := append(orders("s", 4), Order{ID: "x", SKU: "s", Qty: 1}) // plus one recorded, never answered
	// 5 recorded sales, but the stock went down by 4: one was clobbered.
	r := Audit(Input{Items: []Item{{SKU: "s", Initial: 10, Remaining: 6}}, Acked: acked, Ledger: ledger, NoAnswer: map[string]int{"s": 1}})
	if r.LostUpdates != 1 || !r.Anomalous() {
		t.Errorf("lost updates %d, want 1 (the ledger holds 5 sales, the stock reflects 4): %+v", r.LostUpdates, r)
	}
}

func TestDoubleSoldAndUnrecorded(t *testing.T) {
	ledger := []Order{
		{ID: "o1", SKU: "s", Qty: 1, Key: "k1"},
		{ID: "o1", SKU: "s", Qty: 1, Key: "k1"}, // the same order twice: counted once
		{ID: "o2", SKU: "s", Qty: 2, Key: "k1"}, // k1 sold again
		{ID: "o3", SKU: "s", Qty: 1, Key: "k2"},
		{ID: "o4", SKU: "s", Qty: 1},
	}
	if units, keys := DoubleSold(ledger); units != 2 || keys != 1 {
		t.Errorf("DoubleSold = %d units, %d keys; want 2, 1", units, keys)
	}
	// 6 units taken, 4 in the ledger, nothing pending.
	in := Input{Items: []Item{{SKU: "s", Initial: 10, Remaining: 4}}, Ledger: []Order{{ID: "a", SKU: "s", Qty: 4}}, Drained: true}
	r := Audit(in)
	if r.Unrecorded != 2 || !r.Anomalous() || judge("atomic", r) != Fail {
		t.Errorf("unrecorded %d, anomalous %v: %+v", r.Unrecorded, r.Anomalous(), r)
	}
	in.Drained = false // orders may still be pending: no judgement on the gap
	if r := Audit(in); r.Unrecorded != 0 {
		t.Errorf("unrecorded %d without a drained ledger", r.Unrecorded)
	}
	if !SafeAll([]string{"atomic", "redis-lock"}) || SafeAll([]string{"atomic", "local"}) || SafeAll(nil) {
		t.Error("SafeAll")
	}
}

func TestCheckFalseSoldOut(t *testing.T) {
	// 90 of 100 units sold; sold_out answers for 5, 10 and 11 units.
	// The 10 units left cover 5 and 10: those two answers were false,
	// whatever order they came in, since the stock only fell. 11 was not.
	acked := orders("a", 90)
	in := Input{
		Items:   []Item{{SKU: "a", Initial: 100, Remaining: 10}, {SKU: "b", Initial: 10, Remaining: 0}},
		Acked:   acked,
		Ledger:  acked,
		SoldOut: []SoldOutAnswer{{SKU: "a", Qty: 5}, {SKU: "a", Qty: 10}, {SKU: "a", Qty: 11}, {SKU: "b", Qty: 1}},
	}
	r := Audit(in)
	if r.FalseSoldOut != 2 || r.SKUs[0].FalseSoldOut != 2 || r.SKUs[1].FalseSoldOut != 0 {
		t.Fatalf("false sold-outs = %d (by sku %+v), want 2 on a, 0 on b", r.FalseSoldOut, r.SKUs)
	}
	if !r.Anomalous() || judge("atomic", r) != Fail {
		t.Fatalf("a safe strategy with false sold-outs must fail: anomalous %v, verdict %v", r.Anomalous(), judge("atomic", r))
	}
	if len(r.Problems) != 1 || !strings.Contains(r.Problems[0], "false sold-outs") {
		t.Fatalf("problems = %q, want one naming the false sold-outs", r.Problems)
	}

	// Sold out for real: the stock left is below every refused qty.
	in.Items[0].Remaining = 4
	in.Acked, in.Ledger = orders("a", 96), orders("a", 96)
	if r := Audit(in); r.FalseSoldOut != 0 || r.Anomalous() {
		t.Fatalf("true sold-outs judged false: %+v", r)
	}
}

// checksOf are r's checks as a run of strategy name has them.
func checksOf(name string, r Result) []Check { return Of(strategy.IsSafe(name), r.Checks()...) }

// judge is the verdict on a run of strategy name that found r.
func judge(name string, r Result) Outcome { return OutcomeOf(strategy.IsSafe(name), checksOf(name, r)) }
