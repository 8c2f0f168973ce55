package lock

import (
	"testing"
	"time"
)

func TestBackoffStaysWithinItsCap(t *testing.T) {
	p := RetryPolicy{Min: 2 * time.Millisecond, Max: 100 * time.Millisecond}
	for n := range 70 { // past the shift width, where an unguarded Min<<n overflows
		ceil := p.Max
		if n < 32 && p.Min<<n < ceil {
			ceil = p.Min << n
		}
		for range 200 {
			if d := p.backoff(n); d < 0 || d > ceil {
				t.Fatalf("backoff(%d) = %v, want within [0, %v]", n, d, ceil)
			}
		}
	}
}

func TestRetryPolicyValidation(t *testing.T) {
	for _, p := range []RetryPolicy{
		{},
		{Min: time.Millisecond},
		{Min: time.Second, Max: time.Millisecond},
		{Min: time.Millisecond, Max: time.Second, Attempts: -1},
	} {
		if err := p.validate(); err == nil {
			t.Errorf("%+v: validate() = nil, want an error", p)
		}
	}
	if err := DefaultRetry.validate(); err != nil {
		t.Errorf("DefaultRetry: %v", err)
	}
}
