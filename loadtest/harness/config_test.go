package harness

import (
	"strings"
	"testing"

	"github.com/stocklock/stocklock/loadtest/report"
)

// TestThresholdsBuiltInCodeAreChecked: a Config's thresholds need not
// come from ParseThreshold; one with an unknown metric or comparison is a
// problem, not a bound that silently never applies.
func TestThresholdsBuiltInCodeAreChecked(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Thresholds = []report.Threshold{{Metric: "p99", Op: "<", Bound: 300}}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("a known threshold: %v", err)
	}
	cfg.Thresholds = []report.Threshold{{Metric: "p98", Op: "<", Bound: 300}, {Metric: "p99", Op: "=<", Bound: 300}}
	err := cfg.Validate()
	for _, want := range []string{"Thresholds p98<300: want a metric", "Thresholds p99=<300: want a metric"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v; want %q", err, want)
		}
	}
}
