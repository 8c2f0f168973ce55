package attack

import (
	"net"
	"net/http"
	"testing"
	"time"
)

// BenchmarkAttackCeiling measures what the attack alone sustains on this
// machine against a trivial endpoint that answers every decrement with a
// sale at once: the harness's own ceiling, which every measured rate must
// stay well below for the service, not the harness, to be what is measured.
//
//	go test -run '^$' -bench AttackCeiling -benchtime 5s ./loadtest/attack
func BenchmarkAttackCeiling(b *testing.B) {
	body := []byte(`{"order_id":"o","sku":"s","qty":1,"replica":"a","remaining":1}`)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	for _, workers := range []int{16, 64} {
		b.Run(map[int]string{16: "16workers", 64: "64workers"}[workers], func(b *testing.B) {
			a, err := Start(b.Context(), Options{
				Name: "ceiling", Targets: []string{base, base}, SKUs: []string{"s"}, Writers: []string{"atomic"},
				Qty: 1, Requests: b.N, Timeout: 10 * time.Second, Workers: workers, MaxWorkers: workers,
			})
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close()
			b.ResetTimer()
			start := time.Now()
			n, bad := 0, 0
			for r := range a.Results {
				n++
				if r.Code != 200 {
					bad++
				}
			}
			b.StopTimer()
			if bad > 0 {
				b.Fatalf("%d of %d answers were not 200", bad, n)
			}
			b.ReportMetric(float64(n)/time.Since(start).Seconds(), "req/s")
		})
	}
}
