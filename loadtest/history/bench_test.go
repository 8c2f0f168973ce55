package history_test

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/stocklock/stocklock/loadtest/history"
)

// BenchmarkCheck10k checks 10,000-operation histories of one SKU: one
// read in ten, stock for half the decrements, the clients always busy (as
// many operations in flight as clients), and a share of the decrements
// with an unknown outcome (each may take effect at any later time), as a
// run with client timeouts produces.
//
//	go test -run '^$' -bench Check10k -benchtime 3x ./loadtest/history/
func BenchmarkCheck10k(b *testing.B) {
	for _, c := range []struct {
		clients int
		unknown float64
	}{{16, 0}, {16, 0.05}, {16, 0.2}, {32, 0}, {64, 0}} {
		ops := Generate(rand.New(rand.NewSource(3)), 10_000, c.clients, c.unknown)
		b.Run(fmt.Sprintf("clients=%d/unknown=%g", c.clients, c.unknown), func(b *testing.B) {
			for b.Loop() {
				if res := history.Check(ops, time.Minute); res.Verdict != history.Yes {
					b.Fatalf("verdict %s: %v", res.Verdict, res.Conflicts())
				}
			}
		})
	}
}
