package history

import (
	"cmp"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Verdict is the linearizability of a history.
type Verdict string

const (
	// Yes: some order of the operations, each placed between its call and
	// its return, explains every answer on one correct inventory item.
	Yes Verdict = "yes"
	// No: no such order exists.
	No Verdict = "no"
	// Undecided: the checker ran out of time (or had nothing to start
	// from); never a pass.
	Undecided Verdict = "unknown"
)

// SKUResult is the check of one SKU's history.
type SKUResult struct {
	SKU     string        `json:"sku"`
	Verdict Verdict       `json:"verdict"`
	Ops     int           `json:"ops"` // operations checked, after merging retries and dropping refusals
	Elapsed time.Duration `json:"elapsed_ns"`
	// Conflict says, for a violation, which operations no order can
	// reconcile; for unknown, why.
	Conflict string `json:"conflict,omitempty"`

	model   porcupine.Model
	info    porcupine.LinearizationInfo
	hasInfo bool
}

// Result is the check of a whole history.
type Result struct {
	Verdict Verdict       `json:"verdict"`
	SKUs    []SKUResult   `json:"skus"`
	Elapsed time.Duration `json:"elapsed_ns"`
}

// Conflicts lists the SKUs' conflict lines, one per SKU that has one.
func (r Result) Conflicts() []string {
	var out []string
	for _, s := range r.SKUs {
		if s.Conflict != "" {
			out = append(out, s.SKU+": "+s.Conflict)
		}
	}
	return out
}

// Check checks ops, SKU by SKU, each within timeout (0: no limit). A SKU
// whose check times out is Undecided, and so is one whose history has no
// set: its initial stock is unknown.
func Check(ops []Op, timeout time.Duration) Result {
	began := time.Now()
	res := Result{Verdict: Yes}
	for _, op := range ops {
		if !slices.ContainsFunc(res.SKUs, func(s SKUResult) bool { return s.SKU == op.SKU }) {
			s := checkSKU(op.SKU, ops, timeout)
			res.SKUs = append(res.SKUs, s)
			if s.Verdict == No || res.Verdict == Yes { // no over unknown over yes
				res.Verdict = s.Verdict
			}
		}
	}
	res.Elapsed = time.Since(began)
	return res
}

func checkSKU(sku string, all []Op, timeout time.Duration) SKUResult {
	began := time.Now()
	ops := operations(sku, all, true)
	s := SKUResult{SKU: sku, Ops: len(ops), model: Model()}
	defer func() { s.Elapsed = time.Since(began) }()
	if !slices.ContainsFunc(ops, func(o porcupine.Operation) bool { return o.Input.(Input).Kind == Set }) {
		s.Verdict, s.Conflict = Undecided, "no set in the history: the initial stock is unknown"
		return s
	}
	switch porcupine.CheckOperationsTimeout(s.model, ops, timeout) {
	case porcupine.Ok:
		s.Verdict = Yes
		return s
	case porcupine.Unknown:
		s.Verdict, s.Conflict = Undecided, fmt.Sprintf("checker timed out after %s", timeout)
		return s
	}
	s.Verdict = No
	// Again, verbosely, for the picture and the conflict line: only a
	// violation pays for the partial linearizations.
	res, info := porcupine.CheckOperationsVerbose(s.model, ops, timeout)
	if res == porcupine.Illegal {
		s.info, s.hasInfo = info, true
		s.Conflict = conflict(s.model, ops, info)
	} else {
		s.Conflict = "not linearizable (the verbose re-check for the picture timed out)"
	}
	return s
}

// Visualize writes porcupine's HTML picture of the SKU's history and its
// longest partial linearizations to path; false when there is none (the
// SKU is linearizable or the check timed out).
func (s SKUResult) Visualize(path string) (bool, error) {
	if !s.hasInfo {
		return false, nil
	}
	if err := porcupine.VisualizePath(s.model, s.info, path); err != nil {
		return false, fmt.Errorf("visualize %s: %w", filepath.Base(path), err)
	}
	return true, nil
}

// Input is a model operation's input.
type Input struct {
	Kind Kind
	Qty  int // decrement
	// Stock is what a set writes.
	Stock int
	// Deferred marks a decrement with an unknown outcome encoded as a
	// pending unit (see operations): at its call it adds one to the
	// state's pending decrements, which later operations may apply.
	Deferred bool
}

// Output is a model operation's output.
type Output struct {
	Outcome Outcome // Sold, SoldOut, Unknown (decrement); OK (read, set)
	// Value is the remaining stock of a sale or the stock a read saw.
	Value int
}

// State is the model's state: the stock, and the decrements with an
// unknown outcome that have been called and may still take effect, all of
// PendingQty units.
type State struct {
	Stock      int
	Pending    int
	PendingQty int
}

// absent is the stock before the first set: no item.
const absent = math.MinInt

// Model is one inventory item: its state is the stock. A set writes it; a
// read returns it; a decrement of qty sells, returning stock-qty, when the
// stock covers qty, and is sold out, changing nothing, otherwise. A
// decrement whose outcome is unknown is accepted either way: placed where
// it sells (or finds the item sold out), or placed last, which is the same
// as never taking effect; or, deferred, it is a pending decrement that any
// later operation may apply first, as many as it needs, or none ever.
func Model() porcupine.Model {
	return porcupine.Model{
		Init: func() any { return State{Stock: absent} },
		Step: func(state, in, out any) (bool, any) {
			return step(state.(State), in.(Input), out.(Output))
		},
		Hash: func(state any) uint64 {
			s := state.(State)
			return uint64(s.Stock)*1_000_003 + uint64(s.Pending)
		},
		DescribeOperation: func(in, out any) string { return describe(in.(Input), out.(Output)) },
		DescribeState: func(state any) string {
			s := state.(State)
			switch {
			case s.Stock == absent:
				return "no item"
			case s.Pending > 0:
				return fmt.Sprintf("stock %d, %d unknown decrements pending", s.Stock, s.Pending)
			}
			return fmt.Sprintf("stock %d", s.Stock)
		},
		DescribeOperationMetadata: func(info any) string {
			s, _ := info.(string)
			return s
		},
	}
}

func step(st State, in Input, out Output) (bool, State) {
	switch {
	case in.Kind == Set:
		return true, State{Stock: in.Stock}
	case st.Stock == absent:
		return in.Kind == Decrement && out.Outcome == Unknown, st
	case in.Kind == Read:
		return st.reach(out.Value)
	case in.Deferred:
		st.Pending++
		st.PendingQty = in.Qty
		return true, st
	}
	switch out.Outcome {
	case Sold:
		ok, before := st.reach(out.Value + in.Qty)
		before.Stock -= in.Qty
		return ok && out.Value >= 0, before
	case SoldOut:
		return st.below(in.Qty)
	case Unknown:
		if st.Stock >= in.Qty {
			st.Stock -= in.Qty
		}
		return true, st
	}
	return false, st
}

// reach applies as many pending decrements as bring the stock to exactly
// target, if that is possible: each applies only while the stock covers
// it, so the stock never goes below zero by them.
func (st State) reach(target int) (bool, State) {
	d := st.Stock - target
	switch {
	case d == 0:
		return true, st
	case d < 0 || st.PendingQty == 0 || target < 0 || d%st.PendingQty != 0 || d/st.PendingQty > st.Pending:
		return false, st
	}
	st.Pending -= d / st.PendingQty
	st.Stock = target
	return true, st
}

// below applies the fewest pending decrements that leave the stock below
// qty (the rest stay pending for later operations), if that is possible.
func (st State) below(qty int) (bool, State) {
	for st.Stock >= qty {
		if st.Pending == 0 || st.Stock < st.PendingQty || st.PendingQty == 0 {
			return false, st
		}
		st.Stock -= st.PendingQty
		st.Pending--
	}
	return true, st
}

func describe(in Input, out Output) string {
	switch in.Kind {
	case Set:
		return fmt.Sprintf("set(%d)", in.Stock)
	case Read:
		return fmt.Sprintf("read → %d", out.Value)
	}
	switch out.Outcome {
	case Sold:
		return fmt.Sprintf("decrement(%d) → sold, remaining %d", in.Qty, out.Value)
	case SoldOut:
		return fmt.Sprintf("decrement(%d) → sold out", in.Qty)
	}
	if in.Deferred {
		return fmt.Sprintf("decrement(%d) → ? (pending from here on)", in.Qty)
	}
	return fmt.Sprintf("decrement(%d) → ?", in.Qty)
}

// operations turns the history of sku into porcupine operations:
// refusals and failed reads are dropped; the attempts of one idempotency
// key are one operation (a key sells at most once) from the first
// attempt's call to the answer that settled it (a sale or sold out); an
// operation no answer settled may take effect at any time after its call,
// or never: it returns after everything else or, when the stock can only
// go down and every decrement asks for the same quantity, it is a pending
// unit from its call on (see sameQty). With the stock only going down, a
// sold-out answer is checked at its return (see setsFirst). Two different
// sales under one key stay two operations: the key was not honoured, and
// the stock must show both. With fast false it uses neither the sold-out
// nor the pending-unit encoding: the plain one, to test them against.
func operations(sku string, all []Op, fast bool) []porcupine.Operation {
	var (
		out   []porcupine.Operation
		byKey = map[string][]Op{}
		keys  []string
		end   int64
	)
	for _, op := range all {
		if op.SKU != sku {
			continue
		}
		end = max(end, op.Return)
		switch {
		case op.Outcome == Refused, op.Kind == Read && op.Outcome != OK, op.Kind == Set && op.Outcome != OK:
		case op.Kind == Decrement && op.Key != "":
			if _, ok := byKey[op.Key]; !ok {
				keys = append(keys, op.Key)
			}
			byKey[op.Key] = append(byKey[op.Key], op)
		default:
			out = append(out, operation(op, op.Call, op.Return))
		}
	}
	for _, k := range keys {
		out = append(out, merge(byKey[k])...)
	}
	monotone := fast && setsFirst(out)
	defer_ := monotone && sameQty(out)
	for i := range out {
		switch out[i].Output.(Output).Outcome {
		case Unknown:
			if defer_ {
				in := out[i].Input.(Input)
				in.Deferred = true
				out[i].Input, out[i].Return = in, out[i].Call
			} else {
				out[i].Return = end + 1
			}
		case SoldOut:
			if monotone {
				out[i].Call = out[i].Return
			}
		}
	}
	slices.SortStableFunc(out, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	return out
}

// setsFirst reports whether every set returned before any other
// operation was called. Then the stock can only go down in any order of
// the operations, and a sold-out answer, true at some point of its
// interval, is true at its end too: it may be checked at its return alone
// without changing the verdict. That spares the checker from trying every
// subset of the many sold-out answers that overlap each other once an item
// sells out.
func setsFirst(ops []porcupine.Operation) bool {
	var lastSet, firstOther int64 = math.MinInt64, math.MaxInt64
	for _, op := range ops {
		if op.Input.(Input).Kind == Set {
			lastSet = max(lastSet, op.Return)
		} else {
			firstOther = min(firstOther, op.Call)
		}
	}
	return lastSet < firstOther
}

// sameQty reports whether every decrement asks for the same quantity.
// Then the decrements with an unknown outcome are interchangeable, and one
// whose effect is placed anywhere after its call is a pending unit that a
// later operation may apply: the model counts them instead of the checker
// trying every place for each (which grows exponentially with the unknown
// outcomes that overlap).
func sameQty(ops []porcupine.Operation) bool {
	q := 0
	for _, op := range ops {
		if in := op.Input.(Input); in.Kind == Decrement {
			if q != 0 && in.Qty != q {
				return false
			}
			q = in.Qty
		}
	}
	return true
}

// merge makes the attempts of one key (in call order) its operations.
func merge(attempts []Op) []porcupine.Operation {
	first := slices.MinFunc(attempts, func(a, b Op) int { return cmp.Compare(a.Call, b.Call) }).Call
	var out []porcupine.Operation
	seen := map[string]bool{}
	for _, a := range attempts {
		if a.Outcome == Sold && !seen[a.OrderID] {
			seen[a.OrderID] = true
			out = append(out, operation(a, first, a.Return))
		}
	}
	if len(out) > 0 {
		return out
	}
	// No sale: the first sold out settled the key, else it is the last attempt's.
	i := slices.IndexFunc(attempts, func(a Op) bool { return a.Outcome == SoldOut })
	if i < 0 {
		i = len(attempts) - 1
	}
	return []porcupine.Operation{operation(attempts[i], first, attempts[i].Return)}
}

func operation(op Op, call, ret int64) porcupine.Operation {
	in := Input{Kind: op.Kind, Qty: op.Qty}
	out := Output{Outcome: op.Outcome}
	switch {
	case op.Kind == Set:
		in.Stock = *op.Stock
	case op.Kind == Read:
		out.Value = *op.Stock
	case op.Outcome == Sold:
		out.Value = *op.Remaining
	}
	return porcupine.Operation{ClientId: op.Client, Input: in, Output: out, Call: call, Return: ret, Metadata: label(op)}
}

// label names an operation in the picture and the conflict line.
func label(op Op) string {
	var parts []string
	for _, p := range [][2]string{{"", op.Strategy}, {"replica ", op.Replica}, {"order ", op.OrderID}, {"key ", op.Key}, {"", op.Error}} {
		if p[1] != "" {
			parts = append(parts, p[0]+p[1])
		}
	}
	return strings.Join(parts, ", ")
}

// conflict names the operations of a violation in one line: the longest
// order found that explains the history, the state it ends in, and the
// first operation (by return time) that could not follow it.
func conflict(m porcupine.Model, ops []porcupine.Operation, info porcupine.LinearizationInfo) string {
	parts := info.PartialLinearizations()
	if len(parts) == 0 {
		return "not linearizable"
	}
	var longest []int
	for _, p := range parts[0] {
		if len(p) > len(longest) {
			longest = p
		}
	}
	done := make([]bool, len(ops))
	state := m.Init()
	for _, id := range longest {
		done[id] = true
		_, state = m.Step(state, ops[id].Input, ops[id].Output)
	}
	stuck := -1
	for i, op := range ops {
		if !done[i] && (stuck < 0 || op.Return < ops[stuck].Return) {
			stuck = i
		}
	}
	if stuck < 0 {
		return "not linearizable"
	}
	msg := fmt.Sprintf("after %d operations the best order leaves %s, and %s cannot follow",
		len(longest), m.DescribeState(state), opText(ops[stuck]))
	if len(longest) > 0 {
		msg += "; last placed: " + opText(ops[longest[len(longest)-1]])
	}
	return msg
}

func opText(op porcupine.Operation) string {
	s := fmt.Sprintf("client %d %s [%s..%s]", op.ClientId, describe(op.Input.(Input), op.Output.(Output)),
		ms(op.Call), ms(op.Return))
	if md, _ := op.Metadata.(string); md != "" {
		s += " (" + md + ")"
	}
	return s
}

func ms(ns int64) string { return fmt.Sprintf("%.1fms", float64(ns)/1e6) }
