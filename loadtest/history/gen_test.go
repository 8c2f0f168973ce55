package history_test

import (
	"cmp"
	"fmt"
	"math/rand"
	"slices"
	"time"

	"github.com/stocklock/stocklock/loadtest/history"
)

// Generate simulates n operations of clients concurrent clients on one
// correct item: each operation takes effect at a random moment inside its
// interval, in the order of those moments, so the history is linearizable
// by construction. Reads are about one in ten; a fraction unknown of the
// decrements lose their answer (the client gives up early, the effect
// still happens). The stock is n/2, so the run sells out halfway.
func Generate(rng *rand.Rand, n, clients int, unknown float64) []history.Op {
	type pending struct {
		op    history.Op
		point int64
	}
	stock := n / 2
	ops := []history.Op{{Kind: history.Set, SKU: "s", Stock: history.Int(stock), Call: 0, Return: 1000, Outcome: history.OK}}
	free := make([]int64, clients) // when each client is next idle
	var ps []pending
	for i := range n {
		c := i % clients
		call := free[c] + int64(rng.Intn(2000)) + 2000
		dur := int64(rng.Intn(int(20*time.Millisecond))) + int64(time.Millisecond)
		free[c] = call + dur
		op := history.Op{Client: c, SKU: "s", Call: call, Return: call + dur, Strategy: "sim"}
		if rng.Intn(10) == 0 {
			op.Kind = history.Read
		} else {
			op.Kind, op.Qty, op.OrderID = history.Decrement, 1, fmt.Sprintf("o%d", i)
		}
		ps = append(ps, pending{op, call + rng.Int63n(dur)})
	}
	// Apply in linearization-point order.
	order := make([]int, len(ps))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(ps[a].point, ps[b].point) })
	for _, i := range order {
		op := &ps[i].op
		switch {
		case op.Kind == history.Read:
			op.Stock, op.Outcome = history.Int(stock), history.OK
		case stock >= op.Qty:
			stock -= op.Qty
			op.Outcome, op.Remaining = history.Sold, history.Int(stock)
		default:
			op.Outcome = history.SoldOut
		}
		if op.Kind == history.Decrement && rng.Float64() < unknown {
			op.Outcome, op.Remaining, op.OrderID = history.Unknown, nil, ""
			op.Return = ps[i].point - rng.Int63n(ps[i].point-op.Call+1) // gave up before or at the effect
		}
	}
	for _, p := range ps {
		ops = append(ops, p.op)
	}
	return ops
}
