package harness

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/pkg/stockclient"
)

// TestArrivals checks each shape's arrivals: n of them, in order, within
// the window, and spread as the shape says (the share in its first quarter).
func TestArrivals(t *testing.T) {
	const n, d = 20_000, 4 * time.Second
	for shape, quarter := range map[string][2]float64{ShapeBurst: {0.6, 0.7}, ShapeRamp: {0.05, 0.07}, ShapeConstant: {0.24, 0.26}} {
		at := Arrivals(shape, n, d)
		if len(at) != n || !slices.IsSorted(at) || at[0] < 0 || at[n-1] >= d {
			t.Fatalf("%s: %d arrivals from %s to %s, sorted %v; want %d within [0, %s), in order", shape, len(at), at[0], at[n-1], slices.IsSorted(at), n, d)
		}
		first := 0
		for _, a := range at {
			if a < d/4 {
				first++
			}
		}
		if share := float64(first) / n; share < quarter[0] || share > quarter[1] {
			t.Errorf("%s: %.3f of the buyers in the first quarter, want %g to %g", shape, share, quarter[0], quarter[1])
		}
	}
	if at := Arrivals(ShapeBurst, 3, 0); !slices.Equal(at, []time.Duration{0, 0, 0}) {
		t.Errorf("over 0: %v, want all at once", at)
	}
}

// TestFlashKind checks how a buyer's final answer is classified: by the
// code in the error envelope, not the status alone.
func TestFlashKind(t *testing.T) {
	for _, c := range []struct {
		err  error
		late bool
		want string
	}{
		{nil, false, report.KindSale},
		{&stockclient.Error{Status: 409, Code: "sold_out"}, false, report.KindSoldOut},
		{fmt.Errorf("decrement: %w", &stockclient.Error{Status: 503, Code: "overloaded", RetryAfter: time.Second}), false, report.KindShed},
		{&stockclient.Error{Status: 503, Code: "fenced"}, false, report.KindUnavailable},
		{&stockclient.Error{Status: 503, Code: "overloaded"}, true, report.KindShed}, // answered, however late
		{context.DeadlineExceeded, true, report.KindTimedOut},
		{&stockclient.Error{Status: 500, Code: "internal"}, false, report.KindError},
		{fmt.Errorf("connection reset"), false, report.KindError},
	} {
		if got := flashKind(c.err, c.late); got != c.want {
			t.Errorf("flashKind(%v, late %v) = %q, want %q", c.err, c.late, got, c.want)
		}
	}
}

// TestRetryWait checks that a retry honours Retry-After, with jitter up
// to half of it, and backs off otherwise.
func TestRetryWait(t *testing.T) {
	ra := &stockclient.Error{Status: 503, Code: "overloaded", RetryAfter: time.Second}
	for range 100 {
		if w := retryWait(ra, 0); w < time.Second || w > 1500*time.Millisecond {
			t.Fatalf("after Retry-After 1s: waits %s, want 1s to 1.5s", w)
		}
		if w := retryWait(&stockclient.Error{Status: 503, Code: "fenced"}, 2); w < 100*time.Millisecond || w >= 300*time.Millisecond {
			t.Fatalf("third try without Retry-After: waits %s, want 100ms to 300ms", w)
		}
	}
}

// TestPastKneeRates checks the rates offered past a knee: 2, 4 and 8
// times it, at most 5000 req/s, and the knee found in a sweep.
func TestPastKneeRates(t *testing.T) {
	for knee, want := range map[int][]int{50: {100, 200, 400}, 400: {800, 1600, 3200}, 1000: {2000, 4000, 5000}, 2000: {4000, 5000}, 3000: {5000}} {
		if got := pastKneeRates(knee); !slices.Equal(got, want) {
			t.Errorf("past a knee of %d: %v, want %v", knee, got, want)
		}
	}
	runs := []report.Run{
		{Strategy: "atomic", CapacityStep: 1, ReplicaCount: 2, TargetRate: 50},
		{Strategy: "atomic", CapacityStep: 2, ReplicaCount: 2, TargetRate: 100},
		{Strategy: "atomic", CapacityStep: 3, ReplicaCount: 2, TargetRate: 200, Saturated: "p99 over"},
		{Strategy: "batched", CapacityStep: 1, ReplicaCount: 2, TargetRate: 400},
		{Strategy: "atomic", CapacityStep: 1, ReplicaCount: 4, TargetRate: 800},
	}
	if k := knee(runs, "atomic", 2); k != 100 {
		t.Errorf("atomic's knee on 2 replicas: %d, want 100", k)
	}
	if k := knee(runs, "buckets", 2); k != capacityFirstRate {
		t.Errorf("a strategy without a step within the limits: knee %d, want the first rate", k)
	}
}

// TestBuyerRetries runs buyers against a replica that sheds every first
// request of a key: a buyer with a retry left buys on its retry, and the
// retry budget stops the others, whose last answer (shed) stands.
func TestBuyerRetries(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		seen[key]++
		n := seen[key]
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Replica", "a") // the client reads the envelope of the service's answers only
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":"overloaded","message":"shed","replica":"a"}`)
			return
		}
		fmt.Fprintf(w, `{"order_id":"o-%s","sku":"s","qty":1,"remaining":0,"strategy":"atomic","replica":"a"}`, key)
	}))
	defer srv.Close()
	h := &Harness{cfg: Config{Qty: 1, SKUs: 1}, replicas: []string{srv.URL}, prefix: "t"}
	r := buyAll(t, h, Flash{Buyers: 4, Patience: 5 * time.Second, Retries: 1, RetryBudget: 0.5}) // 2 retries for 4 buyers
	kinds := map[string]int{}
	for _, b := range r.buyers {
		kinds[b.kind]++
	}
	if kinds[report.KindSale] != 2 || kinds[report.KindShed] != 2 || r.retried.Load() != 2 || r.attempts.Load() != 6 {
		t.Errorf("final answers %v, %d retries of %d attempts; want 2 sales on their retry and 2 shed, 6 attempts", kinds, r.retried.Load(), r.attempts.Load())
	}
}

// buyAll runs a flash run of atomic with f's buyers through h, all of
// them at once, and returns it once each has its final answer.
func buyAll(t *testing.T, h *Harness, f Flash) *flashRun {
	t.Helper()
	api, done := herdClient(f)
	t.Cleanup(done)
	r := h.newFlashRun(f, api, "atomic", "fl")
	r.began = time.Now()
	var wg sync.WaitGroup
	for i := range f.Buyers {
		wg.Go(func() { r.buy(t.Context(), i, r.began) })
	}
	wg.Wait()
	return r
}

// TestFlashEvents: the buyers' final answers reach the sink as answer
// bins that add up to every buyer, by kind, a second emit sends nothing
// new, and one sell-out event comes when the last unit sold.
func TestFlashEvents(t *testing.T) {
	var mu sync.Mutex
	left := 2
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sell := left > 0
		left -= map[bool]int{true: 1}[sell]
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Replica", "a")
		if !sell {
			w.WriteHeader(http.StatusConflict)
			fmt.Fprint(w, `{"error":"sold_out","message":"sold out","replica":"a"}`)
			return
		}
		fmt.Fprintf(w, `{"order_id":"o-%s","sku":"s","qty":1,"remaining":0,"strategy":"atomic","replica":"a"}`, r.Header.Get("Idempotency-Key"))
	}))
	defer srv.Close()
	var evs []Event
	sink := func(ev Event) {
		mu.Lock()
		defer mu.Unlock()
		evs = append(evs, ev)
	}
	h := &Harness{cfg: Config{Qty: 1, SKUs: 1, Stock: 2}, replicas: []string{srv.URL}, prefix: "t", sink: sink}
	r := buyAll(t, h, Flash{Buyers: 10, Patience: 5 * time.Second})
	r.emitBins()
	r.emitBins()
	kinds, sellOuts := map[string]int64{}, 0
	for _, ev := range evs {
		switch ev.Type {
		case EventAnswers:
			if ev.Strategy != "atomic" || ev.Bin == nil || ev.Bin.Width != answerBin.Seconds() {
				t.Errorf("an answers event %+v", ev)
				continue
			}
			for k, n := range ev.Bin.Kinds {
				kinds[k] += n
			}
		case EventSellOut:
			sellOuts++
			if ev.Progress == nil || ev.Progress.Sold != 2 {
				t.Errorf("the sell-out's progress %+v: want 2 sold", ev.Progress)
			}
		}
	}
	if kinds[report.KindSale] != 2 || kinds[report.KindSoldOut] != 8 || len(kinds) != 2 || sellOuts != 1 {
		t.Errorf("answers %v, %d sell-outs; want 2 sales, 8 sold out, one sell-out", kinds, sellOuts)
	}
}
