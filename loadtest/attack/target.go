package attack

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// skuPicker chooses the sku of each request: always sku 0 for one hot sku,
// uniformly for skew 0, or Zipf-distributed (sku 0 the hottest).
type skuPicker struct {
	mu   sync.Mutex
	n    int
	rng  *rand.Rand
	zipf *rand.Zipf
}

func newSKUPicker(n int, skew float64, seed int64) *skuPicker {
	p := &skuPicker{n: n, rng: rand.New(rand.NewSource(seed))}
	if n > 1 && skew > 1 {
		p.zipf = rand.NewZipf(p.rng, skew, 1, uint64(n-1))
	}
	return p
}

func (p *skuPicker) pick() int {
	if p.n <= 1 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.zipf != nil {
		return int(p.zipf.Uint64())
	}
	return p.rng.Intn(p.n)
}

// decrementTargeter returns a Vegeta Targeter, safe for concurrent use by
// the attack's workers, whose requests go to the replica at base and
// alternate across the strategies (one, or every one of a mixed run), each
// decrementing one sku. With keys != "", every request carries an
// Idempotency-Key of its own, keys-<n>.
func decrementTargeter(base string, skus []string, picker *skuPicker, qty int, strategies []string, keys string) vegeta.Targeter {
	bodies := make([][]byte, len(strategies))
	for i, s := range strategies {
		bodies[i], _ = json.Marshal(map[string]any{"qty": qty, "strategy": s})
	}
	hdr := http.Header{"Content-Type": []string{"application/json"}}
	urls := make([]string, len(skus))
	for i, s := range skus {
		urls[i] = base + "/v1/items/" + url.PathEscape(s) + "/decrement"
	}
	var next atomic.Uint64
	return func(t *vegeta.Target) error {
		if t == nil {
			return vegeta.ErrNilTarget
		}
		i := next.Add(1) - 1
		t.Method = http.MethodPost
		t.URL = urls[picker.pick()]
		t.Body = bodies[i%uint64(len(bodies))]
		t.Header = hdr
		if keys != "" {
			t.Header = hdr.Clone()
			t.Header.Set("Idempotency-Key", fmt.Sprintf("%s-%d", keys, i))
		}
		return nil
	}
}

// countedPacer wraps a Pacer and stops the attack after n hits (n > 0).
type countedPacer struct {
	vegeta.Pacer
	n uint64
}

func (p countedPacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if p.n > 0 && hits >= p.n {
		return 0, true
	}
	return p.Pacer.Pace(elapsed, hits)
}

// pacer builds the attack's pacer: a constant rate, or with rate 0 no
// pacing at all (each worker sends its next request when the last one is
// answered), stopped after requests hits when requests > 0.
func pacer(rate, requests int) vegeta.Pacer {
	return countedPacer{Pacer: vegeta.ConstantPacer{Freq: rate, Per: time.Second}, n: uint64(requests)}
}
