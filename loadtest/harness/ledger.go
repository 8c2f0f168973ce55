package harness

import (
	"context"
	"time"

	"github.com/stocklock/stocklock/loadtest/verdict"
	"github.com/stocklock/stocklock/pkg/stockclient"
)

// ledgerOrders reads sku's ledger since a time through c, all its pages,
// as the verdict's orders.
func ledgerOrders(ctx context.Context, c *stockclient.Client, sku string, since time.Time) ([]verdict.Order, error) {
	orders, err := c.AllOrders(ctx, sku, since)
	if err != nil {
		return nil, err
	}
	out := make([]verdict.Order, 0, len(orders))
	for _, o := range orders {
		out = append(out, verdict.Order{ID: o.ID, SKU: o.SKU, Qty: int(o.Qty), Replica: o.Replica, Strategy: o.Strategy, Key: o.Key})
	}
	return out, nil
}
