package history

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

// TestFastEncodingAgrees checks the sold-out and pending-unit encodings
// against the plain one (every unknown outcome returns after everything,
// every sold out keeps its interval) on small random histories, half of
// them with one answer falsified: the verdicts must be the same.
func TestFastEncodingAgrees(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	no := 0
	for i := range 3000 {
		ops := randomHistory(rng, 3+rng.Intn(4), 4+rng.Intn(10))
		if i%2 == 1 {
			falsify(rng, ops)
		}
		fast := porcupine.CheckOperations(Model(), operations("s", ops, true))
		plain := porcupine.CheckOperations(Model(), operations("s", ops, false))
		if fast != plain {
			t.Fatalf("history %d: fast encoding says %v, plain %v:\n%s", i, fast, plain, dump(ops))
		}
		if !plain {
			no++
		}
	}
	if no < 300 {
		t.Fatalf("only %d of 3000 histories not linearizable: the test does not exercise violations", no)
	}
}

// randomHistory simulates clients on a correct item: each operation takes
// effect at a random point of its interval; a third of the decrements
// lose their answer, and of those half never took effect.
func randomHistory(rng *rand.Rand, stock, n int) []Op {
	type p struct {
		op    Op
		point int64
		skip  bool
	}
	ops := []Op{{Kind: Set, SKU: "s", Stock: Int(stock), Call: 0, Return: 1, Outcome: OK}}
	var ps []p
	for i := range n {
		call := int64(2 + rng.Intn(40))
		dur := int64(1 + rng.Intn(15))
		op := Op{Client: i, SKU: "s", Call: call, Return: call + dur, Kind: Decrement, Qty: 1, OrderID: fmt.Sprint(i)}
		if rng.Intn(4) == 0 {
			op.Kind, op.Qty, op.OrderID = Read, 0, ""
		}
		ps = append(ps, p{op: op, point: call + rng.Int63n(dur+1), skip: rng.Intn(6) == 0})
	}
	for range len(ps) { // apply in point order
		best := -1
		for i := range ps {
			if ps[i].op.Outcome == "" && (best < 0 || ps[i].point < ps[best].point) {
				best = i
			}
		}
		op := &ps[best].op
		switch {
		case op.Kind == Read:
			op.Outcome, op.Stock = OK, Int(stock)
		case rng.Intn(3) == 0 && ps[best].skip:
			op.Outcome = Unknown // never took effect
		case stock >= op.Qty:
			stock -= op.Qty
			op.Outcome, op.Remaining = Sold, Int(stock)
			if rng.Intn(3) == 0 {
				op.Outcome, op.Remaining = Unknown, nil // took effect, answer lost
			}
		default:
			op.Outcome = SoldOut
		}
	}
	for _, x := range ps {
		ops = append(ops, x.op)
	}
	return ops
}

// falsify changes one answer: a remaining or a read off by one, or a sale
// told sold out.
func falsify(rng *rand.Rand, ops []Op) {
	i := 1 + rng.Intn(len(ops)-1)
	op := &ops[i]
	switch {
	case op.Outcome == Sold && rng.Intn(2) == 0:
		op.Outcome, op.Remaining = SoldOut, nil
	case op.Outcome == Sold:
		op.Remaining = Int(*op.Remaining + 1 - 2*rng.Intn(2))
	case op.Kind == Read:
		op.Stock = Int(*op.Stock + 1 - 2*rng.Intn(2))
	case op.Outcome == SoldOut:
		op.Outcome, op.Remaining = Sold, Int(rng.Intn(3))
	}
}

func dump(ops []Op) string {
	var b strings.Builder
	_ = WriteJSONL(&b, ops)
	return b.String()
}
