package history_test

import (
	"bytes"
	"encoding/xml"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stocklock/stocklock/loadtest/history"
	"github.com/stocklock/stocklock/loadtest/verdict"
)

const ms = int64(time.Millisecond)

func set(sku string, stock int, call, ret int64) history.Op {
	return history.Op{Kind: history.Set, SKU: sku, Stock: history.Int(stock), Call: call * ms, Return: ret * ms, Outcome: history.OK}
}

func sold(client int, sku string, remaining int, call, ret int64) history.Op {
	return history.Op{Client: client, Kind: history.Decrement, SKU: sku, Qty: 1, Call: call * ms, Return: ret * ms,
		Outcome: history.Sold, Remaining: history.Int(remaining), OrderID: randID()}
}

func decrement(client int, sku string, o history.Outcome, call, ret int64) history.Op {
	return history.Op{Client: client, Kind: history.Decrement, SKU: sku, Qty: 1, Call: call * ms, Return: ret * ms, Outcome: o}
}

func read(client int, sku string, stock int, call, ret int64) history.Op {
	return history.Op{Client: client, Kind: history.Read, SKU: sku, Stock: history.Int(stock), Call: call * ms, Return: ret * ms, Outcome: history.OK}
}

var idSeq int

func randID() string {
	idSeq++
	return "o" + string(rune('a'+idSeq%26)) + strings.Repeat("x", idSeq/26)
}

// totals runs the harness's arithmetic over a history: what the verdict
// package would say from its sales and the final stock alone.
func totals(ops []history.Op, initial, final int) verdict.Result {
	var in verdict.Input
	in.Items = []verdict.Item{{SKU: ops[0].SKU, Initial: initial, Remaining: final}}
	for _, op := range ops {
		if op.Outcome == history.Sold {
			o := verdict.Order{ID: op.OrderID, SKU: op.SKU, Qty: op.Qty}
			in.Acked = append(in.Acked, o)
			in.Ledger = append(in.Ledger, o)
		}
	}
	return verdict.Audit(in)
}

func TestDoubleSaleWithRightTotals(t *testing.T) {
	// Stock 3. Clients 1 and 2 both sell "the second-to-last unit": each
	// is told 2 remain, which only one of them can be. Client 3 then
	// sells the last, and a read sees 0: 3 units sold, 3 taken, totals
	// clean. Only the order of the answers gives it away.
	ops := []history.Op{
		set("s", 3, 0, 1),
		sold(1, "s", 2, 10, 20),
		sold(2, "s", 2, 12, 22),
		sold(3, "s", 0, 30, 40),
		read(4, "s", 0, 50, 51),
	}
	if r := totals(ops, 3, 0); r.Anomalous() {
		t.Fatalf("the totals should look clean, so that only the history shows the double sale: %+v", r)
	}
	res := history.Check(ops, 10*time.Second)
	if res.Verdict != history.No {
		t.Fatalf("verdict %s, want no", res.Verdict)
	}
	c := res.Conflicts()
	if len(c) != 1 || !strings.Contains(c[0], "remaining 2") {
		t.Errorf("conflict line does not name the double sale: %q", c)
	}
	t.Logf("conflict: %s", c)
	path := filepath.Join(t.TempDir(), "v.html")
	ok, err := res.SKUs[0].Visualize(path)
	if err != nil || !ok {
		t.Fatalf("visualize: %v, %v", ok, err)
	}
	if b, _ := os.ReadFile(path); !bytes.Contains(b, []byte("remaining 2")) {
		t.Errorf("the picture does not show the operations")
	}
}

func TestLinearizableHistories(t *testing.T) {
	cases := map[string][]history.Op{
		"concurrent sales in either order": {
			set("s", 2, 0, 1),
			sold(1, "s", 0, 10, 30), // placed second
			sold(2, "s", 1, 12, 32),
			decrement(3, "s", history.SoldOut, 40, 41),
			read(4, "s", 0, 42, 43),
		},
		"an unknown outcome that took effect": {
			set("s", 2, 0, 1),
			decrement(1, "s", history.Unknown, 5, 6), // timed out early, sold later
			read(2, "s", 2, 10, 11),
			sold(3, "s", 0, 20, 21),
		},
		"an unknown outcome that never did": {
			set("s", 2, 0, 1),
			decrement(1, "s", history.Unknown, 5, 6),
			sold(3, "s", 1, 20, 21),
			read(2, "s", 1, 30, 31),
		},
		"refusals change nothing": {
			set("s", 1, 0, 1),
			decrement(1, "s", history.Refused, 5, 6),
			read(2, "s", 1, 10, 11),
		},
	}
	for name, ops := range cases {
		if res := history.Check(ops, 10*time.Second); res.Verdict != history.Yes {
			t.Errorf("%s: %s %v", name, res.Verdict, res.Conflicts())
		}
	}
}

func TestViolations(t *testing.T) {
	cases := map[string][]history.Op{
		"a read of stock already sold": {
			set("s", 1, 0, 1),
			sold(1, "s", 0, 10, 20),
			read(2, "s", 1, 25, 26),
		},
		"sold out while stock remained": {
			set("s", 2, 0, 1),
			sold(1, "s", 1, 10, 20),
			decrement(2, "s", history.SoldOut, 25, 26),
		},
		"oversold: a sale below zero": {
			set("s", 1, 0, 1),
			sold(1, "s", 0, 10, 20),
			sold(2, "s", -1, 25, 30),
		},
		"a refused request that sold after all": {
			set("s", 1, 0, 1),
			decrement(1, "s", history.Refused, 5, 6),
			read(2, "s", 0, 10, 11),
		},
	}
	for name, ops := range cases {
		if res := history.Check(ops, 10*time.Second); res.Verdict != history.No {
			t.Errorf("%s: %s, want no", name, res.Verdict)
		}
	}
}

func TestRetriesOfOneKey(t *testing.T) {
	att := func(o history.Outcome, call, ret int64, attempt int, order string, remaining int) history.Op {
		op := decrement(1, "s", o, call, ret)
		op.Key, op.Attempt, op.OrderID = "k1", attempt, order
		if o == history.Sold {
			op.Remaining = history.Int(remaining)
		}
		return op
	}
	// The first attempt timed out after the sale; the retry replayed it.
	replayed := []history.Op{
		set("s", 2, 0, 1),
		att(history.Unknown, 10, 20, 1, "", 0),
		read(2, "s", 1, 25, 26),
		att(history.Sold, 30, 40, 2, "o1", 1),
		read(2, "s", 1, 45, 46),
	}
	if res := history.Check(replayed, 10*time.Second); res.Verdict != history.Yes {
		t.Errorf("a replayed sale: %s %v", res.Verdict, res.Conflicts())
	}
	// The retry sold again: the key was not honoured, and two units left.
	twice := []history.Op{
		set("s", 2, 0, 1),
		att(history.Unknown, 10, 20, 1, "", 0),
		read(2, "s", 1, 25, 26),
		att(history.Sold, 30, 40, 2, "o2", 0),
		read(2, "s", 0, 45, 46),
	}
	if res := history.Check(twice, 10*time.Second); res.Verdict != history.No {
		t.Errorf("a key that sold twice: %s, want no", res.Verdict)
	}
}

func TestNoSetIsUndecided(t *testing.T) {
	res := history.Check([]history.Op{sold(1, "s", 0, 10, 20)}, time.Second)
	if res.Verdict != history.Undecided {
		t.Errorf("verdict %s, want unknown", res.Verdict)
	}
}

func TestTimeoutIsUndecidedNeverYes(t *testing.T) {
	// Many overlapping unknowns and no way to order the sales cheaply:
	// with a timeout this short the checker cannot finish.
	ops := Generate(rand.New(rand.NewSource(1)), 20000, 64, 0.2)
	res := history.Check(ops, time.Nanosecond)
	if res.Verdict != history.Undecided {
		t.Errorf("verdict %s with a 1ns timeout, want unknown", res.Verdict)
	}
}

func TestJSONLRoundTrip(t *testing.T) {
	ops := Generate(rand.New(rand.NewSource(2)), 200, 4, 0.1)
	var b bytes.Buffer
	if err := history.WriteJSONL(&b, ops); err != nil {
		t.Fatal(err)
	}
	back, err := history.ReadJSONL(&b)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != len(ops) || history.Check(back, 10*time.Second).Verdict != history.Yes {
		t.Errorf("read back %d of %d ops", len(back), len(ops))
	}
	if _, err := history.ReadJSONL(strings.NewReader(`{"op":"decrement","sku":"s","qty":1,"call_ns":5,"return_ns":9,"outcome":"sold"}`)); err == nil {
		t.Error("a sale without remaining was accepted")
	}
}

func TestClassify(t *testing.T) {
	cases := []struct {
		status  int
		code    string
		refused bool
		want    history.Outcome
	}{
		{200, "", false, history.Sold},
		{409, "sold_out", false, history.SoldOut},
		{409, "idempotency_in_progress", false, history.Refused},
		{422, "idempotency_key_reused", false, history.Refused},
		{503, "stale_read", false, history.Refused},
		{503, "lease_lost", false, history.Refused},
		{503, "shutting_down", false, history.Refused},
		{503, "something_new", false, history.Unknown},
		{500, "outcome_unknown", false, history.Unknown},
		{502, "", false, history.Unknown},
		{0, "", false, history.Unknown},
		{0, "", true, history.Refused},
	}
	for _, c := range cases {
		if got := history.Classify(c.status, c.code, c.refused); got != c.want {
			t.Errorf("Classify(%d, %q, %v) = %s, want %s", c.status, c.code, c.refused, got, c.want)
		}
	}
}

func TestWriteSVG(t *testing.T) {
	ops := Generate(rand.New(rand.NewSource(4)), 20, 3, 0.2)
	var b bytes.Buffer
	if err := history.WriteSVG(&b, ops, "s"); err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(b.Bytes(), new(struct{})); err != nil {
		t.Fatalf("not XML: %v", err)
	}
	if n := strings.Count(b.String(), "<rect"); n != len(ops) {
		t.Errorf("%d bars for %d operations", n, len(ops))
	}
}
