package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stocklock/stocklock/pkg/strategy"
)

// A sale under a lock puts one observation in each step's series of
// stock_sale_step_seconds; a sale of a strategy without a lock puts none.
func TestSaleStepMetrics(t *testing.T) {
	s := newServer(t, testConfig(t, "r1"))
	h := s.Handler()
	if rec, _ := call(t, h, http.MethodPut, "/v1/items/steps-1", jsonCT, `{"stock": 5}`); rec.Code != 200 {
		t.Fatalf("PUT: %d", rec.Code)
	}
	for _, name := range []string{strategy.RedisLock, strategy.MongoLease, strategy.Atomic} {
		if rec, sale := call(t, h, http.MethodPost, "/v1/items/steps-1/decrement", jsonCT, `{"qty": 1, "strategy": "`+name+`"}`); rec.Code != 200 {
			t.Fatalf("decrement with %s: %d %v", name, rec.Code, sale)
		}
	}
	rec, _ := call(t, h, http.MethodGet, "/metrics", "", "")
	body := rec.Body.String()
	for _, name := range []string{strategy.RedisLock, strategy.MongoLease} {
		for _, step := range strategy.SaleSteps {
			m := `stock_sale_step_seconds_count{step="` + step + `",strategy="` + name + `"} 1` + "\n"
			if !strings.Contains(body, m) {
				t.Errorf("/metrics lacks %q", strings.TrimSpace(m))
			}
		}
	}
	if strings.Contains(body, `stock_sale_step_seconds_count{step="write",strategy="atomic"}`) {
		t.Errorf("/metrics has sale steps of atomic, which takes no lock")
	}
}
