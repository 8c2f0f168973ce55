package stockclient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/stockclient"
	"github.com/stocklock/stocklock/services/stock/server"
	"github.com/stocklock/stocklock/services/stock/server/servertest"
)

// TestDecrementAsync: against a replica that serves queued, DecrementAsync
// answers the order queued and AwaitOrder its sale, the ledger's; an
// order the stock cannot cover awaits to ErrSoldOut, and its keyed retry
// answers the same order (ErrSoldOut again, nothing sold); an unknown
// order is ErrOrderNotFound; a strategy that ignores the preference
// answers the sale at once.
func TestDecrementAsync(t *testing.T) {
	base := replica(t, func(cfg *server.Config) { *cfg = servertest.WithNATS(t, *cfg, natsURL) })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c := stockclient.New(base, stockclient.WithAdminToken(adminToken), stockclient.WithRetry(stockclient.Retry{}))
	if _, err := c.PutItem(ctx, "ca", 2); err != nil {
		t.Fatal(err)
	}

	out, err := c.DecrementAsync(ctx, "ca", 2, "queued")
	if err != nil || out.Queued == nil || out.Sale != nil || out.Location != "/v1/items/ca/orders/"+out.Queued.OrderID {
		t.Fatalf("DecrementAsync: %+v, %v; want the order queued, with its Location", out, err)
	}
	sale, err := c.AwaitOrder(ctx, "ca", out.Queued.OrderID)
	if err != nil || sale.OrderID != out.Queued.OrderID || sale.Remaining == nil || *sale.Remaining != 0 || !sale.Recorded {
		t.Fatalf("AwaitOrder: %+v, %v; want the sale, remaining 0", sale, err)
	}
	if all, err := c.AllOrders(ctx, "ca", time.Time{}); err != nil || len(all) != 1 || all[0].ID != sale.OrderID {
		t.Fatalf("the ledger: %+v, %v; want the awaited sale", all, err)
	}

	key := stockclient.IdempotencyKey(stockclient.NewIdempotencyKey())
	out, err = c.DecrementAsync(ctx, "ca", 1, "queued", key)
	if err != nil || out.Queued == nil {
		t.Fatalf("DecrementAsync keyed: %+v, %v; want queued", out, err)
	}
	if _, err := c.AwaitOrder(ctx, "ca", out.Queued.OrderID); !errors.Is(err, stockclient.ErrSoldOut) {
		t.Fatalf("AwaitOrder of an order the stock cannot cover: %v; want ErrSoldOut", err)
	}
	if _, err := c.Restock(ctx, "ca", 5); err != nil {
		t.Fatal(err)
	}
	if again, err := c.DecrementAsync(ctx, "ca", 1, "queued", key); !errors.Is(err, stockclient.ErrSoldOut) {
		t.Fatalf("the keyed retry of a refused order after a restock: %+v, %v; want its ErrSoldOut", again, err)
	}
	if _, err := c.Order(ctx, "ca", "0123456789abcdef"); !errors.Is(err, stockclient.ErrOrderNotFound) {
		t.Fatalf("Order of an unknown id: %v; want ErrOrderNotFound", err)
	}
	out, err = c.DecrementAsync(ctx, "ca", 1, "atomic")
	if err != nil || out.Sale == nil || out.Queued != nil || *out.Sale.Remaining != 4 {
		t.Fatalf("DecrementAsync with atomic: %+v, %v; want the sale at once", out, err)
	}
}
