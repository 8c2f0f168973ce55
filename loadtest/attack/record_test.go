package attack

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stocklock/stocklock/loadtest/history"
)

// TestRetriesOnlyUnanswered: with retries on, a 200 whose body carries no
// remaining stock (a buckets sale) is an answer and is not sent again,
// though the history takes its outcome as unknown; a 500 is sent again.
func TestRetriesOnlyUnanswered(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		sends  int64
	}{
		{200, `{"order_id":"o1","remaining":null,"replica":"a"}`, 1},
		{500, `{"error":"outcome_unknown"}`, 4},
	} {
		var sends atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sends.Add(1)
			w.WriteHeader(c.status)
			_, _ = w.Write([]byte(c.body))
		}))
		rec := history.NewRecorder(time.Now())
		tr := &recordingTransport{base: http.DefaultTransport, rec: rec, target: srv.URL, retries: 3, attempt: time.Second}
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/items/s1/decrement", strings.NewReader(`{"qty":1,"strategy":"buckets"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", "k1")
		if resp, err := tr.RoundTrip(req); err != nil || resp.StatusCode != c.status {
			t.Fatalf("%d: RoundTrip: %v, %v", c.status, resp, err)
		}
		srv.Close()
		if got := sends.Load(); got != c.sends {
			t.Errorf("%d answer: sent %d times, want %d", c.status, got, c.sends)
		}
		if ops := rec.Ops(); len(ops) != int(c.sends) || ops[0].Outcome != history.Unknown {
			t.Errorf("%d answer: %d ops recorded, first %+v; want %d, unknown", c.status, len(ops), ops, c.sends)
		}
	}
}
