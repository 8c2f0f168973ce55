package report

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/stocklock/stocklock/pkg/strategy"
)

// Bound returns the most sales per second of one hot item that the step
// times allow: one over the sum of the mean times, in ms, of the held
// steps (run under the item's lock, one holder after the other); nil when
// a held step has no time or the sum is not positive.
func Bound(stepMs map[string]float64, held []string) *float64 {
	sum := 0.0
	for _, s := range held {
		ms, ok := stepMs[s]
		if !ok {
			return nil
		}
		sum += ms
	}
	if sum <= 0 {
		return nil
	}
	b := 1000 / sum
	return &b
}

// BoundShare is the run's sales/s as a share of its bound, "-" without one.
func (r Run) BoundShare() string {
	if r.BoundPerSec == nil || *r.BoundPerSec <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*r.SalesPerSec / *r.BoundPerSec)
}

// BoundText is the run's bound in sales/s, "-" without one.
func (r Run) BoundText() string {
	return orDash(r.BoundPerSec, func(v float64) string { return fmt.Sprintf("%.1f", v) })
}

// StepsText lists the run's mean step times in strategy.SaleSteps order
// ("lock <mean> ms, read <mean> ms, ..."), "-" without any.
func (r Run) StepsText() string {
	var parts []string
	for _, s := range strategy.SaleSteps {
		if ms, ok := r.StepMs[s]; ok {
			parts = append(parts, fmt.Sprintf("%s %.2f ms", s, ms))
		}
	}
	return cmp.Or(strings.Join(parts, ", "), "-")
}
