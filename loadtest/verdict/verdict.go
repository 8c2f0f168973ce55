// Package verdict judges a load-test run: the arithmetic that finds whether
// it sold more than it had, lost updates, or disagrees with the order
// ledger, and the checks every run mode turns its findings into,
// from which Judge alone decides pass or fail. It knows nothing about HTTP
// or Vegeta: the harness feeds it the stock it set and read back, the sales
// acknowledged (200 responses) and the ledger's orders.
package verdict

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/stocklock/stocklock/pkg/strategy"
)

// SafeAll reports whether every strategy of a mixed run is safe, so that
// the mix must be too.
func SafeAll(ss []string) bool {
	return len(ss) > 0 && !slices.ContainsFunc(ss, func(s string) bool { return !strategy.IsSafe(s) })
}

// Class is what one response means for the sale it asked for.
type Class string

const (
	// Sold is a 200: the service acknowledged the sale.
	Sold Class = "sold"
	// SoldOut is a 409 sold_out: the stock could not cover the quantity.
	SoldOut Class = "sold out"
	// Unavailable is a 503: the service gave up (typically it could not get
	// the lock within its wait budget) and sold nothing.
	Unavailable Class = "unavailable"
	// Other is any other HTTP status.
	Other Class = "other"
	// Transport is a request that got no HTTP response at all (connection
	// refused or reset, timeout).
	Transport Class = "transport error"
)

// Classify maps an HTTP status code and the service's error code (the
// "error" field of its JSON body, "" if none) to a Class. code 0 means no
// HTTP response arrived. Vegeta's own notion of success counts every 2xx
// and 3xx, which is not what a sale is, so the harness classifies itself.
func Classify(code int, errCode string) Class {
	switch {
	case code == 0:
		return Transport
	case code == 200:
		return Sold
	case code == 409 && errCode == "sold_out":
		return SoldOut
	case code == 503:
		return Unavailable
	default:
		return Other
	}
}

// Order is one sale, as a 200 response or the ledger tells it.
type Order struct {
	ID       string `json:"order_id"`
	SKU      string `json:"sku"`
	Qty      int    `json:"qty"`
	Replica  string `json:"replica,omitempty"`
	Strategy string `json:"strategy,omitempty"`
	Fence    int64  `json:"fence,omitempty"`
	Key      string `json:"key,omitempty"` // the request's Idempotency-Key, as the ledger records it
}

// Item is one sku's stock before and after a run.
type Item struct {
	SKU     string
	Initial int // the stock the run set with PUT
	// Remaining is the stock read back after the run: an unsafe strategy
	// that checks and writes separately can drive it below zero.
	Remaining int
}

// Input is everything the checks need about one run.
type Input struct {
	Items  []Item
	Acked  []Order // the orders of the run's 200 responses, one per response
	Ledger []Order // the ledger's orders for the run's skus and time window
	// NoAnswer counts, per sku, the requests that reached a replica and
	// got no answer that says whether they sold (the connection was reset
	// or timed out, not refused; or a 5xx other than 503, such as 500
	// outcome_unknown): each may have sold without telling the client.
	NoAnswer map[string]int
	// Drained is true when the items were read back with no order pending
	// (a unit taken whose order the service has yet to write): the stock
	// and the ledger must then agree unit for unit.
	Drained bool
	// SoldOut are the run's sold_out answers, one per answer. A run
	// raises no stock after its PUT, so stock only falls: a sold_out for
	// qty of a sku that ends the run with at least qty left was false.
	SoldOut []SoldOutAnswer
}

// SoldOutAnswer is one sold_out answer: the sku and the quantity it refused.
type SoldOutAnswer struct {
	SKU string
	Qty int
}

// SKUResult is the arithmetic for one sku.
type SKUResult struct {
	SKU          string `json:"sku"`
	Initial      int    `json:"initial"`
	Remaining    int    `json:"remaining"`
	Sold         int    `json:"sold"`
	Oversold     int    `json:"oversold"`
	Lost         int    `json:"lost_updates"`
	Unacked      int    `json:"unacknowledged"`
	FalseSoldOut int    `json:"false_sold_out,omitempty"` // see Result.FalseSoldOut
}

// Ledger is how the ledger differs from the acknowledged sales.
type Ledger struct {
	Missing int `json:"missing"` // acknowledged orders the ledger does not hold
	// Extra are ledger orders that no 200 response of the run announced
	// (for example a sale whose response was lost to a client timeout).
	Extra int `json:"extra"`
	// DuplicateAcked counts repeats of an order id among the 200
	// responses, and 200 responses without an order id.
	DuplicateAcked  int `json:"duplicate_acked"`
	DuplicateLedger int `json:"duplicate_ledger"` // repeats of an order id in the ledger
	Differ          int `json:"differ"`           // orders in both whose sku or qty disagree
	// Unanswered is the part of Extra that requests without any HTTP
	// answer explain, sku by sku: a replica killed after recording a sale
	// and before answering, a client timeout. The sale happened and was
	// never acknowledged, so nobody was told a wrong thing: not an anomaly.
	Unanswered int `json:"unanswered"`
}

// Total is the number of ledger anomalies of every kind: Extra orders
// count only beyond those that unanswered requests explain.
func (l Ledger) Total() int {
	return l.Missing + (l.Extra - l.Unanswered) + l.DuplicateAcked + l.DuplicateLedger + l.Differ
}

// Totals are the figures of a whole run that its report shows as they are.
type Totals struct {
	Sold      int `json:"sold"`      // the sum of qty over the 200 responses
	Initial   int `json:"initial"`   // summed over the skus
	Remaining int `json:"remaining"` // summed over the skus
	// Oversold is, summed over skus, max(0, sold-initial, -remaining):
	// units acknowledged beyond what there was, or a stock driven below 0.
	Oversold int `json:"oversold"`
	// LostUpdates is, summed over skus, the larger of two gaps: sold -
	// (initial-remaining), acknowledged sales that the stock does not
	// reflect, and ledger units - (initial-remaining), recorded sales that
	// it does not reflect. The second catches a lost update that an
	// unacknowledged sale on the same sku would hide from the first.
	LostUpdates int `json:"lost_updates"`
	// Unacknowledged is the opposite gap, max(0, (initial-remaining)-sold):
	// units that left the stock without a 200 the harness saw. Not an
	// anomaly by itself: a request that got no answer may have sold, and a
	// replica killed between its stock write and its order insert leaves
	// a unit taken with no order (the ledger check excuses extra orders up
	// to the unanswered requests of their sku).
	Unacknowledged int `json:"unacknowledged"`
	LedgerMismatch int `json:"ledger_mismatch"`
	// FalseSoldOut is, summed over skus, the sold_out answers for a qty
	// that the stock left at the end still covers (see Input.SoldOut): a
	// unit a strategy cannot find while it is there is lost to the sale as
	// surely as a unit sold twice is to the stock.
	FalseSoldOut int    `json:"false_sold_out"`
	Ledger       Ledger `json:"ledger"`
}

// Result is the outcome of the checks for one run.
type Result struct {
	Totals
	// Unrecorded is, with Input.Drained, max(0, (initial-remaining) -
	// ledger units) summed over skus: units that left the stock with no
	// order in the ledger although nothing is pending. An anomaly.
	Unrecorded int `json:"unrecorded"`
	// DoubleSold is the number of units the ledger sold under an
	// idempotency key beyond its first order: a retry that sold again.
	DoubleSold     int         `json:"double_sold"`
	DoubleSoldKeys int         `json:"double_sold_keys"`
	SKUs           []SKUResult `json:"skus,omitempty"`
	Problems       []string    `json:"problems,omitempty"`
}

// Checks are the run's arithmetic as checks: no oversell, lost update,
// ledger mismatch, unrecorded or double-sold unit, or false sold-out.
// Their kind is the caller's (see Of).
func (r Result) Checks() []Check {
	return []Check{Zero("oversold", r.Oversold), Zero("lost_updates", r.LostUpdates), Zero("ledger_mismatch", r.LedgerMismatch),
		Zero("unrecorded", r.Unrecorded), Zero("double_sold", r.DoubleSold), Zero("false_sold_out", r.FalseSoldOut)}
}

// Anomalous reports whether one of the run's checks fails.
func (r Result) Anomalous() bool { return OutcomeOf(true, Of(true, r.Checks()...)) == Fail }

// Audit computes the anomalies of one run.
func Audit(in Input) Result {
	var r Result
	sold := make(map[string]int, len(in.Items))
	acked := make(map[string]bool, len(in.Acked))
	for _, o := range in.Acked {
		sold[o.SKU] += o.Qty
		r.Sold += o.Qty
		acked[o.ID] = true
	}
	// recorded are the ledger's units per sku, extra its orders that no
	// acknowledged order announced.
	recorded, extra := map[string]int{}, map[string]int{}
	for _, o := range distinct(in.Ledger) {
		recorded[o.SKU] += o.Qty
		if !acked[o.ID] {
			extra[o.SKU]++
		}
	}
	refused := make(map[string][]int, len(in.Items))
	for _, so := range in.SoldOut {
		refused[so.SKU] = append(refused[so.SKU], so.Qty)
	}
	for _, it := range in.Items {
		s := SKUResult{SKU: it.SKU, Initial: it.Initial, Remaining: it.Remaining, Sold: sold[it.SKU]}
		for _, qty := range refused[it.SKU] {
			if qty <= it.Remaining {
				s.FalseSoldOut++
			}
		}
		s.Oversold = max(0, s.Sold-s.Initial, -s.Remaining)
		taken := s.Initial - s.Remaining // what the stock says left it
		s.Lost = max(0, s.Sold-taken, recorded[it.SKU]-taken)
		s.Unacked = max(0, taken-s.Sold)
		if in.Drained {
			r.Unrecorded += max(0, taken-recorded[it.SKU])
		}
		r.Initial += s.Initial
		r.Remaining += s.Remaining
		r.Oversold += s.Oversold
		r.LostUpdates += s.Lost
		r.Unacknowledged += s.Unacked
		r.FalseSoldOut += s.FalseSoldOut
		r.SKUs = append(r.SKUs, s)
	}
	// A 200 for a sku the run did not set up cannot be checked against
	// any stock: count it where it does the most good, as a problem.
	for _, sku := range slices.Sorted(maps.Keys(sold)) {
		if !slices.ContainsFunc(in.Items, func(it Item) bool { return it.SKU == sku }) {
			r.Problems = append(r.Problems, fmt.Sprintf("200 responses for sku %q, which the run did not set up", sku))
			r.LedgerMismatch++
		}
	}

	r.Ledger = CompareLedger(in.Acked, in.Ledger)
	for sku, n := range extra {
		r.Ledger.Unanswered += min(n, max(in.NoAnswer[sku], 0))
	}
	r.LedgerMismatch += r.Ledger.Total()
	r.DoubleSold, r.DoubleSoldKeys = DoubleSold(in.Ledger)
	l := r.Ledger
	for _, p := range []struct {
		n    int
		text string
	}{
		{r.Unrecorded, fmt.Sprintf("%d units left the stock with no order in the ledger, and none pending", r.Unrecorded)},
		{r.DoubleSold, fmt.Sprintf("%d units sold twice under %d idempotency keys", r.DoubleSold, r.DoubleSoldKeys)},
		{r.FalseSoldOut, fmt.Sprintf("%d sold_out answers for a qty that the stock left at the end still covers (false sold-outs)", r.FalseSoldOut)},
		{r.Oversold, fmt.Sprintf("oversold %d units", r.Oversold)},
		{r.LostUpdates, fmt.Sprintf("%d acknowledged units not reflected in the stock (lost updates)", r.LostUpdates)},
		{l.Total(), fmt.Sprintf("ledger differs from the 200 responses: %d missing, %d extra (%d of them explained by requests that got no answer), %d repeated or empty ids in responses, %d repeated ids in the ledger, %d with a different sku or qty",
			l.Missing, l.Extra, l.Unanswered, l.DuplicateAcked, l.DuplicateLedger, l.Differ)},
	} {
		if p.n > 0 {
			r.Problems = append(r.Problems, p.text)
		}
	}
	return r
}

// CompareLedger compares the acknowledged orders with the ledger's.
func CompareLedger(acked, ledger []Order) Ledger {
	var l Ledger
	ack := make(map[string]Order, len(acked))
	for _, o := range acked {
		if _, dup := ack[o.ID]; dup || o.ID == "" {
			l.DuplicateAcked++
			continue
		}
		ack[o.ID] = o
	}
	orders := distinct(ledger)
	l.DuplicateLedger = len(ledger) - len(orders)
	for _, o := range orders {
		switch a, ok := ack[o.ID]; {
		case !ok:
			l.Extra++
		case a.SKU != o.SKU || a.Qty != o.Qty:
			l.Differ++
		}
	}
	l.Missing = len(ack) - (len(orders) - l.Extra)
	return l
}

// distinct is orders with each order id once, its first.
func distinct(orders []Order) []Order {
	seen := make(map[string]bool, len(orders))
	return slices.DeleteFunc(slices.Clone(orders), func(o Order) bool {
		dup := seen[o.ID]
		seen[o.ID] = true
		return dup
	})
}

// Outcome is the verdict on one run.
type Outcome string

const (
	// Pass: a safe strategy showed no anomaly.
	Pass Outcome = "pass"
	// Fail: a safe strategy failed a safety check (see OutcomeOf).
	Fail Outcome = "FAIL"
	// Demonstrated: an unsafe strategy showed the anomaly it is there to
	// show.
	Demonstrated Outcome = "demonstrated"
	// NotReproduced: an unsafe strategy happened to show no anomaly in this
	// run (too little concurrency, or luck). Not a harness failure.
	NotReproduced Outcome = "not reproduced in this run"
)

// DoubleSold counts the ledger's units sold under an idempotency key
// beyond the key's first order (each order id once), and the keys that
// sold more than once.
func DoubleSold(ledger []Order) (units, keys int) {
	keyed := slices.DeleteFunc(slices.Clone(ledger), func(o Order) bool { return o.Key == "" })
	count := map[string]int{} // orders by key
	for _, o := range distinct(keyed) {
		count[o.Key]++
		if count[o.Key] > 1 {
			units += o.Qty
		}
		if count[o.Key] == 2 {
			keys++
		}
	}
	return units, keys
}

// Kind says what a failed check means.
type Kind string

const (
	// Safety: a safe strategy's run must pass it. A failure fails the
	// harness run (exit status 1).
	Safety Kind = "safety"
	// Demonstration: a safety check on an unsafe strategy or a
	// deliberately weakened drill. A failure is the race the run is there
	// to show, never a failure of the harness run.
	Demonstration Kind = "demonstration"
	// Threshold: a bound the user set (--threshold). A breach fails the
	// harness run with its own exit status (3).
	Threshold Kind = "threshold"
	// Limit: a capacity step's limits. The first step past them ends its
	// sweep; it fails nothing.
	Limit Kind = "limit"
)

// Check is one decision about a harness run: what was checked, the figure
// observed, the bound it must meet and whether it did.
type Check struct {
	Name     string `json:"name"`
	Scope    string `json:"scope,omitempty"` // what it is about (a run, a repeat, a replica); empty beside its run
	Kind     Kind   `json:"kind"`
	Observed string `json:"observed"`
	Bound    string `json:"bound"`
	Pass     bool   `json:"pass"`
}

// Zero is the check that a count of anomalies is 0.
func Zero(name string, n int) Check { return Equal(name, n, 0) }

// Equal is the check that a figure equals the one it must.
func Equal(name string, got, want int) Check {
	return Check{Name: name, Observed: fmt.Sprint(got), Bound: fmt.Sprint(want), Pass: got == want}
}

// Of gives checks their kind, Safety for a safe run and Demonstration for
// another, in place, and returns them.
func Of(safe bool, checks ...Check) []Check {
	for i := range checks {
		checks[i].Kind = map[bool]Kind{true: Safety, false: Demonstration}[safe]
	}
	return checks
}

// Result is the check's outcome in a word: pass, or what its failure is.
func (c Check) Result() string {
	if c.Pass {
		return "pass"
	}
	return cmp.Or(map[Kind]string{Safety: "FAIL", Threshold: "breached", Demonstration: "demonstrated"}[c.Kind], "past the limit")
}

func (c Check) String() string {
	s := fmt.Sprintf("%s %s, bound %s", c.Name, c.Observed, c.Bound)
	if c.Scope != "" {
		s = c.Scope + ": " + s
	}
	return s
}

// OutcomeOf is the verdict on one run from its checks: a failed safety
// check fails a safe run and demonstrates an unsafe one's race;
// thresholds and limits do not change it.
func OutcomeOf(safe bool, checks []Check) Outcome {
	anomalous := slices.ContainsFunc(checks, func(c Check) bool { return !c.Pass && (c.Kind == Safety || c.Kind == Demonstration) })
	switch {
	case safe && anomalous:
		return Fail
	case safe:
		return Pass
	case anomalous:
		return Demonstrated
	default:
		return NotReproduced
	}
}

// Status is what the checks of a whole harness run say, from the best to
// the worst.
type Status int

const (
	Passed   Status = iota // no safety check failed and no threshold was breached
	Breached               // a threshold was breached, and no safety check failed
	Failed                 // a safety check failed
)

// Judge is the one decision on a harness run: the worst of its checks.
func Judge(checks []Check) Status {
	s := Passed
	for _, c := range checks {
		switch {
		case c.Pass:
		case c.Kind == Safety:
			return Failed
		case c.Kind == Threshold:
			s = Breached
		}
	}
	return s
}

// Failures are the checks that fail a harness run (safety and threshold),
// as text.
func Failures(checks []Check) []string {
	var out []string
	for _, c := range checks {
		if !c.Pass && (c.Kind == Safety || c.Kind == Threshold) {
			out = append(out, c.String())
		}
	}
	return out
}

// TokenCheck is whether fencing tokens kept increasing across a fault: the
// lowest token of the sales that started after the fault was over must be
// above the highest of the sales completed before it struck, and no token
// may carry two sales.
type TokenCheck struct {
	OK        bool  `json:"ok"`
	Before    int   `json:"sales_before"`
	MaxBefore int64 `json:"max_token_before"`
	After     int   `json:"sales_after"`
	MinAfter  int64 `json:"min_token_after"`
	Reused    int   `json:"reused"`
}

// Check is the tokens as a check.
func (tc TokenCheck) Check() Check {
	return Check{Name: "fencing_tokens", Pass: tc.OK, Bound: "increasing across the fault, none reused",
		Observed: fmt.Sprintf("highest before %d, lowest after %d, %d reused", tc.MaxBefore, tc.MinAfter, tc.Reused)}
}
