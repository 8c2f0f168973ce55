package attack

import (
	"encoding/json"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

func TestTargeterSendsToItsReplica(t *testing.T) {
	base := "http://127.0.0.1:1"
	tr := decrementTargeter(base, []string{"hot"}, newSKUPicker(1, 0, 1), 2, []string{"atomic"}, "")
	for range 10 {
		var tg vegeta.Target
		if err := tr(&tg); err != nil {
			t.Fatal(err)
		}
		if tg.Method != "POST" || tg.URL != base+"/v1/items/hot/decrement" || tg.Header.Get("Idempotency-Key") != "" {
			t.Fatalf("target %+v", tg)
		}
		var body struct {
			Qty      int
			Strategy string
		}
		if err := json.Unmarshal(tg.Body, &body); err != nil || body.Qty != 2 || body.Strategy != "atomic" {
			t.Fatalf("body %s: %v", tg.Body, err)
		}
	}
}

func TestTargeterMixesStrategiesAndKeys(t *testing.T) {
	strategies := []string{"atomic", "redis-lock", "optimistic"}
	tr := decrementTargeter("http://127.0.0.1:1", []string{"hot"}, newSKUPicker(1, 0, 1), 1, strategies, "k")
	seen := map[string]int{} // strategy → requests
	keys := map[string]bool{}
	for i := range 60 {
		var tg vegeta.Target
		if err := tr(&tg); err != nil {
			t.Fatal(err)
		}
		var body struct{ Strategy string }
		if err := json.Unmarshal(tg.Body, &body); err != nil {
			t.Fatal(err)
		}
		if want := strategies[i%len(strategies)]; body.Strategy != want {
			t.Fatalf("request %d is %s's, want %s's: the strategies take turns", i, body.Strategy, want)
		}
		seen[body.Strategy]++
		k := tg.Header.Get("Idempotency-Key")
		if k == "" || keys[k] {
			t.Fatalf("key %q missing or repeated", k)
		}
		keys[k] = true
	}
	for _, s := range strategies {
		if seen[s] != 20 {
			t.Errorf("%d %s requests, want 20: %v", seen[s], s, seen)
		}
	}
}

func TestSKUPickerSkew(t *testing.T) {
	p := newSKUPicker(10, 2, 1)
	hits := make([]int, 10)
	for range 10000 {
		hits[p.pick()]++
	}
	if hits[0] < hits[1] || hits[1] < hits[9] || hits[0] < 4000 {
		t.Fatalf("zipf 2 over 10 skus should favour sku 0: %v", hits)
	}
	u := newSKUPicker(4, 0, 1)
	hits = make([]int, 4)
	for range 4000 {
		hits[u.pick()]++
	}
	for _, h := range hits {
		if h < 800 || h > 1200 {
			t.Fatalf("uniform: %v", hits)
		}
	}
}

func TestCountedPacer(t *testing.T) {
	p := pacer(100, 3)
	for hits := uint64(0); hits < 3; hits++ {
		if _, stop := p.Pace(time.Duration(hits)*10*time.Millisecond, hits); stop {
			t.Fatalf("stopped at %d", hits)
		}
	}
	if _, stop := p.Pace(time.Second, 3); !stop {
		t.Fatal("must stop after 3 hits")
	}
	// rate 0: no wait at all, until the count.
	p = pacer(0, 2)
	if wait, stop := p.Pace(0, 1); wait != 0 || stop {
		t.Fatal("rate 0 must not pace")
	}
	if _, stop := pacer(10, 0).Pace(time.Hour, 1<<30); stop {
		t.Fatal("no count: only the duration ends the attack")
	}
}

func TestShare(t *testing.T) {
	for _, c := range []struct{ total, n int }{{100, 2}, {101, 2}, {7, 3}, {0, 2}, {1, 2}} {
		sum, lo, hi := 0, c.total, 0
		for i := range c.n {
			s := Share(c.total, c.n, i)
			sum += s
			lo, hi = min(lo, s), max(hi, s)
		}
		if sum != c.total || hi-lo > 1 {
			t.Errorf("Share(%d over %d): parts add up to %d, spread %d", c.total, c.n, sum, hi-lo)
		}
	}
}
