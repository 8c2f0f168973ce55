package report

import (
	"strings"
	"testing"

	"github.com/stocklock/stocklock/loadtest/verdict"
)

func TestParseThreshold(t *testing.T) {
	for _, c := range []struct {
		in, strategy, metric, op string
		bound                    float64
	}{
		{"p99<300ms", "", "p99", "<", 300},
		{"p(95) <= 1.5s", "", "p95", "<=", 1500},
		{"p50<20", "", "p50", "<", 20}, // a bare number is ms
		{"sales_per_s>=150", "", "sales_per_s", ">=", 150},
		{"atomic:oversold==0", "atomic", "oversold", "==", 0},
		{"redis-lock:error_rate!=0.5", "redis-lock", "error_rate", "!=", 0.5},
	} {
		th, err := ParseThreshold(c.in)
		if err != nil || th.Strategy != c.strategy || th.Metric != c.metric || th.Op != c.op || th.Bound != c.bound {
			t.Errorf("ParseThreshold(%q) = %+v, %v", c.in, th, err)
		}
	}
	for in, want := range map[string]string{
		"p99":               "want [strategy:]metric op value",
		"<3":                "want [strategy:]metric op value",
		"p99=3ms":           "want one of",
		"p99<":              "want one of",
		"p42<3ms":           `unknown metric "p42"`,
		"nope:p99<3ms":      `unknown strategy "nope"`,
		"p99<fast":          "not a duration",
		"sales_per_s>=fast": "not a number",
		"sold>3ms":          "not a number",
	} {
		if _, err := ParseThreshold(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseThreshold(%q): %v, want it to say %q", in, err, want)
		}
	}
}

func TestThresholdCheck(t *testing.T) {
	run := Run{Strategy: "atomic", Latency: Latency{P99: 350}, SalesPerSec: 149.5, Requests: 200, Unavailable: 3, Other: 1}
	for in, want := range map[string]string{
		"p99<300ms":               "breached p99 350ms < 300ms",
		"p99<=350":                "pass p99 350ms <= 350",
		"p99<350":                 "breached p99 350ms < 350",
		"max>0":                   "breached max 0.00ms > 0",
		"p50!=0":                  "breached p50 0.00ms != 0",
		"atomic:sales_per_s>=150": "breached sales_per_s 149.5 >= 150",
		"error_rate<0.05":         "pass error_rate 0.02 < 0.05",
	} {
		th, err := ParseThreshold(in)
		if err != nil {
			t.Fatal(err)
		}
		c, ok := th.Check(run)
		if got := strings.Join([]string{c.Result(), c.Name, c.Observed, c.Bound}, " "); !ok || got != want || c.Kind != verdict.Threshold {
			t.Errorf("%s: %q (applies %v), want %q", in, got, ok, want)
		}
	}
	// Another strategy's threshold, or a figure the run lacks, does not apply.
	for _, in := range []string{"redis-lock:p99<1s", "lock_wait_p99<1s", "recovery<1s"} {
		th, _ := ParseThreshold(in)
		if _, ok := th.Check(run); ok {
			t.Errorf("%s applies to %+v", in, run)
		}
	}
	// A threshold built in code, not parsed, checks the same.
	built := Threshold{Metric: "p99", Op: "<", Bound: 300}
	if c, ok := built.Check(run); !ok || c.Pass || c.Bound != "< 300" || built.String() != "p99<300" || !built.Known() {
		t.Errorf("built in code: %+v, %v, %s", c, ok, built)
	}
	if (Threshold{Metric: "p99", Op: "=<"}).Known() || (Threshold{Metric: "p98", Op: "<"}).Known() {
		t.Error("an unknown op or metric is Known")
	}
	// A fault after which sales never resumed breaches any recovery bound.
	th, _ := ParseThreshold("recovery<1h")
	if c, ok := th.Check(Run{Strategy: "atomic", Injected: true}); !ok || c.Pass || c.Observed != "never" {
		t.Errorf("recovery never: %+v, %v", c, ok)
	}
}
