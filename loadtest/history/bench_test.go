package history_test

import (
	"math/rand"
	"testing"
	"time"

	"github.com/stocklock/stocklock/loadtest/history"
)

// BenchmarkCheck10k checks a 10,000-operation history of one SKU: 16
// clients, one read in ten, and 1% of the decrements with an unknown
// outcome (each may take effect at any later time), as a run with client
// timeouts produces.
//
//	go test -run '^$' -bench Check10k -benchtime 5x ./loadtest/history/
func BenchmarkCheck10k(b *testing.B) {
	for _, c := range []struct {
		name    string
		unknown float64
	}{{"answered", 0}, {"unknown-1pct", 0.01}} {
		ops := Generate(rand.New(rand.NewSource(3)), 10_000, 16, c.unknown)
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if res := history.Check(ops, time.Minute); res.Verdict != history.Yes {
					b.Fatalf("verdict %s: %v", res.Verdict, res.Conflicts())
				}
			}
		})
	}
}
