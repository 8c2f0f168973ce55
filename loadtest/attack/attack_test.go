package attack

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestFewerRequestsThanTargets: a request count below the number of
// targets ends after that many requests; a target whose share is 0 sends
// nothing (a 0 count would otherwise mean no bound at all).
func TestFewerRequestsThanTargets(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"order_id":"o","qty":1,"replica":"a"}`))
	}))
	defer srv.Close()
	a, err := Start(t.Context(), Options{
		Name: "few", Targets: []string{srv.URL, srv.URL, srv.URL}, SKUs: []string{"s"}, Writers: []string{"atomic"},
		Qty: 1, Requests: 2, Timeout: 5 * time.Second, Workers: 3, MaxWorkers: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	n := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range a.Results {
			n++
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the attack did not end after its 2 requests")
	}
	if n != 2 {
		t.Errorf("%d answers, want 2", n)
	}
}
