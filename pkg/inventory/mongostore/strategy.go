package mongostore

import (
	"context"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"
)

// pause waits d inside the read-modify-write window (the teaching knob that
// widens the race), or returns early with ctx's cause.
func pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// soldOut returns the ErrSoldOut of a decrement that found stock < qty.
func soldOut(sku string, stock, qty int64) error {
	return &inventory.SoldOutError{SKU: sku, Stock: stock, Qty: qty}
}
