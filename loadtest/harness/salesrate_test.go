package harness

import (
	"testing"
	"time"

	"github.com/stocklock/stocklock/loadtest/drill"
)

func TestSalesRate(t *testing.T) {
	start := time.Unix(0, 0)
	// 100 sales, one every 10ms, then one straggler 5s later: the rate is
	// still about 100/s.
	var ends []drill.Sale
	for i := range 100 {
		ends = append(ends, drill.Sale{End: start.Add(time.Duration(i+1) * 10 * time.Millisecond)})
	}
	ends = append(ends, drill.Sale{End: start.Add(6 * time.Second)})
	if r := salesRate(ends, start); r < 95 || r > 105 {
		t.Fatalf("rate %v, want about 100", r)
	}
	// Few sales: from the start to the last.
	if r := salesRate(ends[:4], start); r != 100 {
		t.Fatalf("rate %v, want 100", r)
	}
	// A stall and then a burst does not make the rate look higher than
	// what was offered: 50 sales due at 100/s that all complete at 1s.
	var burst []drill.Sale
	for range 50 {
		burst = append(burst, drill.Sale{End: start.Add(time.Second)})
	}
	if r := salesRate(burst, start); r > 50 {
		t.Fatalf("rate %v, want at most 50", r)
	}
	if salesRate(nil, start) != 0 {
		t.Fatal("no sales, no rate")
	}
}
