package live

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/stocklock/stocklock/loadtest/harness"
)

// target follows which strategy the page's fault buttons strike: the one
// whose attack runs with stock left. A fault asked for while none does
// waits for the next one that does, so that it never lands on a strategy
// that has nothing left to sell.
type target struct {
	left     []string // the race's strategies whose run has not started
	current  string   // the strategy whose run is under way, "" before the first
	attacked bool     // its attack has reported progress
	selling  bool     // its attack runs and the stock is not sold out
	pending  string   // a fault waiting for the next strategy that sells
	// holds: the race is a checkout, whose strategies "sell" from their
	// first hold until window after it (began).
	holds  bool
	window time.Duration
	began  time.Time
}

// Strike is what a fault button would strike now, as the page shows it.
type Strike struct {
	// Strategy is the strategy a fault asked for now strikes: the one
	// selling, or the next one to; "" when none is left.
	Strategy string `json:"strategy,omitempty"`
	Now      bool   `json:"now"`               // Strategy is selling: a fault strikes at once
	After    string `json:"after,omitempty"`   // the strategy that sold out, when Strategy is the next one
	Pending  string `json:"pending,omitempty"` // a fault waiting for Strategy to sell
}

// newTarget starts following a race of strategies, in the order they run.
func newTarget(strategies []string) target {
	return target{left: slices.Clone(strategies)}
}

// observe follows ev and returns whether what a fault strikes changed.
func (t *target) observe(ev harness.Event) bool {
	before := t.strike()
	switch ev.Type {
	case harness.EventRunStart:
		t.begin(ev.Strategy)
	case harness.EventProgress:
		if ev.Strategy == t.current && ev.Progress != nil {
			t.attacked = true
			t.selling = !ev.Progress.Final && ev.Progress.Remaining > 0
		}
	case harness.EventRunEnd:
		if ev.Strategy == t.current {
			t.selling = false
		}
	case harness.EventHeld:
		if !t.holds {
			break
		}
		if ev.Strategy != t.current { // its first hold: its buyers arrive
			t.begin(ev.Strategy)
			t.attacked, t.began = true, ev.At
		}
		t.selling = ev.At.Sub(t.began) < t.window
	}
	return t.strike() != before
}

// begin makes strategy the current one, not attacked yet, and the ones
// before it done.
func (t *target) begin(strategy string) {
	if i := slices.Index(t.left, strategy); i >= 0 {
		t.left = t.left[i+1:]
	}
	t.current, t.attacked, t.selling = strategy, false, false
}

func (t *target) strike() Strike {
	s := Strike{Pending: t.pending}
	switch {
	case t.selling:
		s.Strategy, s.Now = t.current, true
	case t.current != "" && !t.attacked:
		s.Strategy = t.current
	case len(t.left) > 0:
		s.Strategy = t.left[0]
		s.After = t.current
	default:
		s.After = t.current
	}
	return s
}

// Errors of ask.
var (
	errNothingLeft = errors.New("nothing left to strike")
	errWaiting     = errors.New("a fault already waits")
)

// ask queues fault for the next strategy that sells; the caller strikes
// at once when a strategy is selling.
func (t *target) ask(fault string) (Strike, error) {
	s := t.strike()
	switch {
	case s.Strategy == "":
		return s, fmt.Errorf("%w: %s has sold out and no strategy follows", errNothingLeft, s.After)
	case t.pending != "":
		return s, fmt.Errorf("%w for %s: %s", errWaiting, s.Strategy, t.pending)
	}
	t.pending = fault
	s.Pending = fault
	return s, nil
}

// due hands over the waiting fault if a strategy now sells, and forgets
// it: the caller strikes it, and gives it back if it could not.
func (t *target) due() (fault string) {
	if t.selling {
		fault, t.pending = t.pending, ""
	}
	return fault
}

// follow is the harness's sink: it publishes ev, follows what the fault
// buttons strike and strikes a waiting fault once a strategy sells, or
// queues it again if it could not.
func (s *Server) follow(ev harness.Event) {
	s.hub.publish(ev.Type, ev)
	s.mu.Lock()
	h := s.current
	changed := s.target.observe(ev)
	fault := s.target.due()
	strike := s.target.strike()
	s.mu.Unlock()
	if fault != "" && h != nil {
		err := h.Inject(fault)
		if err == nil {
			s.logf("the fault %s that waited strikes %s now", fault, strike.Strategy)
		}
		s.mu.Lock()
		if err != nil && s.target.pending == "" {
			s.target.pending = fault // the attack ended, or a fault is under way: the next progress tries again
		}
		strike, changed = s.target.strike(), true
		s.mu.Unlock()
	}
	if changed {
		s.hub.publish("strike", strike)
	}
}

func (s *Server) logf(format string, a ...any) {
	s.hub.publish(harness.EventLog, harness.Event{Type: harness.EventLog, At: time.Now(), Text: fmt.Sprintf(format, a...)})
}

// holdsGuard is how long before a checkout strategy's buyers end the
// page's faults stop striking it: the longest (a network fault, 4 s)
// is over before they end, so that its read-back finds every replica up.
const holdsGuard = 4 * time.Second
