package verdict

import "testing"

// TestJudge: a failed safety check fails the run whatever else failed; a
// breached threshold fails it otherwise; a demonstration or a limit never
// does.
func TestJudge(t *testing.T) {
	safety := Check{Name: "oversold", Kind: Safety, Observed: "3", Bound: "0"}
	breach := Check{Name: "p99", Kind: Threshold, Observed: "1s", Bound: "< 300ms"}
	demo := Check{Name: "lost_updates", Kind: Demonstration, Observed: "9", Bound: "0"}
	limit := Check{Name: "p99", Kind: Limit, Observed: "1s", Bound: "<= 500ms"}
	held := Check{Name: "p99", Kind: Threshold, Observed: "3ms", Bound: "< 300ms", Pass: true}
	for _, c := range []struct {
		name   string
		checks []Check
		want   Status
	}{
		{"none", nil, Passed},
		{"a threshold held, a race shown, a step past its limits", []Check{held, demo, limit}, Passed},
		{"a threshold breached", []Check{held, breach, demo}, Breached},
		{"a safety check failed before a breach", []Check{safety, breach}, Failed},
		{"a safety check failed after a breach", []Check{breach, limit, safety}, Failed},
	} {
		if got := Judge(c.checks); got != c.want {
			t.Errorf("%s: Judge = %v, want %v", c.name, got, c.want)
		}
	}
	// A run's verdict is its safety checks' alone.
	if v := OutcomeOf(true, []Check{breach, limit}); v != Pass {
		t.Errorf("a safe run that breached a threshold: %v, want pass", v)
	}
	if v := OutcomeOf(false, Of(false, Zero("oversold", 2))); v != Demonstrated {
		t.Errorf("an unsafe run that oversold: %v, want demonstrated", v)
	}
	if v := OutcomeOf(true, Of(true, Zero("oversold", 2))); v != Fail {
		t.Errorf("a safe run that oversold: %v, want FAIL", v)
	}
	if f := Failures([]Check{safety, demo, limit, breach, held}); len(f) != 2 || f[0] != "oversold 3, bound 0" {
		t.Errorf("failures %q, want the safety check's and the threshold's", f)
	}
}
