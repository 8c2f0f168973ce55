package harness

import (
	"math"
	"testing"
)

func TestHistogramQuantile(t *testing.T) {
	inf := math.Inf(1)
	cases := []struct {
		name string
		cum  map[float64]float64
		q    float64
		want float64
		ok   bool
	}{
		{"empty", map[float64]float64{}, 0.99, 0, false},
		{"no observations", map[float64]float64{0.1: 0, inf: 0}, 0.99, 0, false},
		// 100 observations, all in (0, 0.01]: p99 interpolates to 0.0099.
		{"one bucket", map[float64]float64{0.01: 100, 0.1: 100, inf: 100}, 0.99, 0.0099, true},
		// 90 in (0,0.01], 10 in (0.01,0.1]: rank 99 is 9/10 into the second.
		{"second bucket", map[float64]float64{0.01: 90, 0.1: 100, inf: 100}, 0.99, 0.01 + 0.09*0.9, true},
		// Rank in +Inf: the highest finite bound.
		{"overflow", map[float64]float64{0.01: 50, 0.1: 60, inf: 100}, 0.99, 0.1, true},
		{"median", map[float64]float64{1: 50, 2: 100, inf: 100}, 0.5, 1, true},
	}
	for _, c := range cases {
		got, ok := histogramQuantile(c.q, c.cum)
		if ok != c.ok || math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: got %v,%v want %v,%v", c.name, got, ok, c.want, c.ok)
		}
	}
}

const metricsBefore = `# HELP stock_lock_wait_seconds Time spent waiting for the item lock.
# TYPE stock_lock_wait_seconds histogram
stock_lock_wait_seconds_bucket{strategy="redis-lock",le="0.001"} 10
stock_lock_wait_seconds_bucket{strategy="redis-lock",le="0.01"} 10
stock_lock_wait_seconds_bucket{strategy="redis-lock",le="0.1"} 10
stock_lock_wait_seconds_bucket{strategy="redis-lock",le="+Inf"} 10
stock_lock_wait_seconds_sum{strategy="redis-lock"} 0.005
stock_lock_wait_seconds_count{strategy="redis-lock"} 10
# HELP stock_requests_total Requests.
# TYPE stock_requests_total counter
stock_requests_total{code="200"} 5
`

const metricsAfter = `# TYPE stock_lock_wait_seconds histogram
stock_lock_wait_seconds_bucket{strategy="redis-lock",le="0.001"} 10
stock_lock_wait_seconds_bucket{strategy="redis-lock",le="0.01"} 10
stock_lock_wait_seconds_bucket{strategy="redis-lock",le="0.1"} 110
stock_lock_wait_seconds_bucket{strategy="redis-lock",le="+Inf"} 110
stock_lock_wait_seconds_sum{strategy="redis-lock"} 5
stock_lock_wait_seconds_count{strategy="redis-lock"} 110
stock_lock_wait_seconds_bucket{strategy="mongo-lease",le="0.001"} 3
stock_lock_wait_seconds_bucket{strategy="mongo-lease",le="0.01"} 3
stock_lock_wait_seconds_bucket{strategy="mongo-lease",le="0.1"} 3
stock_lock_wait_seconds_bucket{strategy="mongo-lease",le="+Inf"} 3
stock_lock_wait_seconds_sum{strategy="mongo-lease"} 0.001
stock_lock_wait_seconds_count{strategy="mongo-lease"} 3
`

func TestLockWaitFromMetrics(t *testing.T) {
	before := parseLockWait([]byte(metricsBefore))
	after := parseLockWait([]byte(metricsAfter))
	if before == nil || after == nil {
		t.Fatal("histogram not found")
	}
	// Only the 100 observations made during the run count: all in
	// (10ms, 100ms], so p99 is 99% of the way through that bucket.
	ms, ok := p99Ms([]histSnapshot{before}, []histSnapshot{after}, "redis-lock")
	if !ok || math.Abs(ms-(10+90*0.99)) > 1e-6 {
		t.Fatalf("p99 = %v ms, %v", ms, ok)
	}
	// A strategy with no wait during the run: no value.
	if _, ok := p99Ms([]histSnapshot{after}, []histSnapshot{after}, "mongo-lease"); ok {
		t.Fatal("no observations must give no value")
	}
	if _, ok := p99Ms([]histSnapshot{before}, []histSnapshot{after}, "atomic"); ok {
		t.Fatal("a strategy without a lock must give no value")
	}
	// Two replicas add up; a replica that could not be scraped is skipped.
	ms, ok = p99Ms([]histSnapshot{before, nil, before}, []histSnapshot{after, nil, after}, "redis-lock")
	if !ok || math.Abs(ms-(10+90*0.99)) > 1e-6 {
		t.Fatalf("two replicas: p99 = %v ms, %v", ms, ok)
	}
	if parseLockWait([]byte("stock_requests_total 3\n")) != nil {
		t.Fatal("no histogram must give nil")
	}
}
