package attack

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
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

// TestLostAnswerNotSettledByAnAnswerThatChangedNothing: after an attempt
// whose answer is lost, a 503 that changed nothing does not settle the
// key (the lost attempt may have sold): it is sent again, and when the
// retries run out the request's outcome is unknown, not a 503. A 503
// with no lost attempt before it is the answer; a 200 settles the key.
func TestLostAnswerNotSettledByAnAnswerThatChangedNothing(t *testing.T) {
	const lost, shed, sold = `500 {"error":"outcome_unknown"}`, `503 {"error":"overloaded"}`, `200 {"order_id":"o1","remaining":3,"replica":"a"}`
	for _, c := range []struct {
		answers []string // one per attempt, the last repeated
		sends   int64
		status  int // the request's answer; 0: outcome unknown
	}{
		{[]string{lost, shed}, 4, 0},
		{[]string{lost, shed, sold}, 3, 200},
		{[]string{shed}, 1, 503},
	} {
		var sends atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			a := c.answers[min(int(sends.Add(1)), len(c.answers))-1]
			status, body, _ := strings.Cut(a, " ")
			code, _ := strconv.Atoi(status)
			w.WriteHeader(code)
			_, _ = w.Write([]byte(body))
		}))
		tr := &recordingTransport{base: http.DefaultTransport, rec: history.NewRecorder(time.Now()), target: srv.URL, retries: 3, attempt: time.Second}
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/items/s1/decrement", strings.NewReader(`{"qty":1,"strategy":"atomic"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", "k1")
		resp, err := tr.RoundTrip(req)
		srv.Close()
		switch {
		case c.status == 0 && !errors.Is(err, errOutcomeUnknown):
			t.Errorf("%q: RoundTrip: %v, %v; want the outcome unknown", c.answers, resp, err)
		case c.status != 0 && (err != nil || resp.StatusCode != c.status):
			t.Errorf("%q: RoundTrip: %v, %v; want %d", c.answers, resp, err, c.status)
		}
		if got := sends.Load(); got != c.sends {
			t.Errorf("%q: sent %d times, want %d", c.answers, got, c.sends)
		}
	}
}
