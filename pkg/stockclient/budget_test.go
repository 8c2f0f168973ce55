package stockclient_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/stockclient"
)

// shedding is a stand-in for a replica that sheds: it answers every
// request as a replica's admission does, 503 overloaded with X-Replica
// (so that the client trusts it) and, when retryAfter is set, Retry-After,
// until ok requests have come; then 200. It counts the requests.
func shedding(t *testing.T, retryAfter string, ok int64) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Replica", "r1")
		w.Header().Set("Content-Type", "application/json")
		if n.Add(1) == ok {
			_, _ = io.WriteString(w, `{"order_id":"o1","sku":"s","qty":1,"remaining":0,"strategy":"atomic","replica":"r1","fence":0,"attempts":1,"at":"2026-12-06T06:00:00Z","recorded":true}`)
			return
		}
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":"overloaded","message":"shed","replica":"r1"}`)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// TestRetryBudget: against a replica that sheds everything, a client's
// retries (and those of the clients At makes from it) stay within the
// budget, Ratio of its requests plus Burst, instead of Attempts times its
// requests; each request still ends with the service's overloaded.
func TestRetryBudget(t *testing.T) {
	srv, n := shedding(t, "", 0)
	c := stockclient.New(srv.URL, stockclient.WithRetry(stockclient.Retry{Attempts: 5, Base: time.Millisecond, Max: time.Millisecond, Ratio: 0.1, Burst: 2}))
	other := c.At(srv.URL)
	const requests = 20
	for i := range requests {
		client := c
		if i%2 == 1 {
			client = other
		}
		if _, err := client.Decrement(t.Context(), "s", 1, "atomic"); !errors.Is(err, stockclient.ErrOverloaded) {
			t.Fatalf("request %d: %v; want overloaded", i, err)
		}
	}
	// At most Burst + Ratio·requests retries: 2 + 2.
	if got := n.Load(); got <= requests || got > requests+4 {
		t.Fatalf("%d attempts for %d requests; want some retries and at most 4", got, requests)
	}
}

// TestRetryAfterHonoured: a request shed with Retry-After: 1 is sent again
// no sooner than a second later (the jitter only adds to it), and then
// succeeds.
func TestRetryAfterHonoured(t *testing.T) {
	srv, n := shedding(t, "1", 2)
	c := stockclient.New(srv.URL, stockclient.WithRetry(stockclient.Retry{Attempts: 3, Base: time.Millisecond}))
	start := time.Now()
	if _, err := c.Decrement(t.Context(), "s", 1, "atomic"); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < time.Second || n.Load() != 2 {
		t.Fatalf("%d attempts, the last after %v; want 2, after Retry-After (1s)", n.Load(), waited)
	}
}
