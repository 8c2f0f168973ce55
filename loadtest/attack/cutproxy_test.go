package attack

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestCutProxy: every request reaches the server; a share of the answers
// never reaches the client, which sees an error instead.
func TestCutProxy(t *testing.T) {
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		io.WriteString(w, "sold")
	}))
	defer srv.Close()
	p, err := startCutProxy(strings.TrimPrefix(srv.URL, "http://"), 0.3)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{}}
	const n = 200
	failed := 0
	for range n {
		req, _ := http.NewRequest("POST", "http://"+p.Addr()+"/x", strings.NewReader("{}"))
		resp, err := hc.Do(req)
		if err != nil {
			failed++
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "sold" {
			t.Fatalf("answer %q passed through the proxy altered", b)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if served.Load() != n {
		t.Errorf("server saw %d of %d requests: the proxy must forward every one", served.Load(), n)
	}
	if failed == 0 || failed != int(p.Cuts()) || failed > n/2 {
		t.Errorf("%d requests failed, %d answers cut, of %d at rate 0.3", failed, p.Cuts(), n)
	}
}
