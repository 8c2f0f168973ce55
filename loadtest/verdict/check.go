package verdict

import (
	"cmp"
	"fmt"
	"slices"
)

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
