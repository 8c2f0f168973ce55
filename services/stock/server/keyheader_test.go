package server_test

import (
	"net/http"
	"testing"
	"time"
)

// TestIdempotencyKeyQuoted: the IETF draft sends Idempotency-Key as a
// Structured Field string ("k"); clients that predate it send k bare. Both
// name one key: a first request with "k" on one replica and its retry with
// k on the other sell once, and the retry replays the sale. Escapes name
// the character they escape.
func TestIdempotencyKeyQuoted(t *testing.T) {
	client := &http.Client{Timeout: time.Minute}
	t.Cleanup(client.CloseIdleConnections)
	reps := startReplicas(t, 2, nil)
	put(t, client, reps[0], "quoted", 10)
	for _, c := range []struct{ first, retry string }{
		{`"order-7"`, `order-7`},
		{`"a\"b\\c"`, `a"b\c`},
		{`plain`, `"plain"`},
	} {
		first := decrementWithKey(t, client, reps[0], "quoted", c.first, `{"qty":2,"strategy":"atomic"}`)
		if first.status != 200 || first.replayed {
			t.Fatalf("first request with key %s: %+v", c.first, first)
		}
		again := decrementWithKey(t, client, reps[1], "quoted", c.retry, `{"qty":2,"strategy":"atomic"}`)
		if again.status != 200 || !again.replayed || again.OrderID != first.OrderID {
			t.Fatalf("retry with key %s after %s: %+v, want the first sale %+v replayed", c.retry, c.first, again, first)
		}
	}
	stock, orders := ledger(t, client, reps[0], "quoted")
	if stock != 4 || len(orders) != 3 {
		t.Fatalf("stock %d with %d orders, want 4 and 3: three keys, one sale each", stock, len(orders))
	}
	if orders[1].Key != `a"b\c` {
		t.Errorf("the escaped key is recorded as %q, want %q", orders[1].Key, `a"b\c`)
	}
}
