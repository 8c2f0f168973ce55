package server

import (
	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/pkg/stockapi"
)

// The JSON bodies the replica writes and reads are pkg/stockapi's, shared
// with pkg/stockclient; this file converts the domain's values into them.

// The fields each request body takes: exactly those of its wire type.
var (
	stockChangeFields = stockapi.Fields(stockapi.StockChange{})
	restockFields     = stockapi.Fields(stockapi.Restock{})
	decrementFields   = stockapi.Fields(stockapi.DecrementRequest{})
	holdRequestFields = stockapi.Fields(stockapi.HoldRequest{})
)

// itemOf is it as the API shows it, answered by replica.
func itemOf(it inventory.Item, replica string) stockapi.Item {
	r := stockapi.Item{
		SKU: it.SKU, Stock: it.Stock, Version: it.Version, Fences: it.Fences,
		Aborted: it.Aborted, AbortedThrough: it.AbortedThrough, Held: it.Held, Replica: replica,
	}
	if len(it.Pending) > 0 {
		r.Pending = make(map[string]stockapi.Order, len(it.Pending))
		for id, o := range it.Pending {
			r.Pending[id] = orderOf(o)
		}
	}
	if len(it.Holds) > 0 {
		r.Holds = make(map[string]stockapi.ItemHold, len(it.Holds))
		for id, h := range it.Holds {
			r.Holds[id] = stockapi.ItemHold{
				ID: h.ID, SKU: h.SKU, Qty: h.Qty, Strategy: h.Strategy, Replica: h.Replica,
				CreatedAt: h.Created, ExpiresAt: h.Expires, State: h.State, Confirmed: h.ConfirmedAt,
				Key: h.Key, Fence: h.Fence,
			}
		}
	}
	return r
}

// orderOf is o as the API shows it.
func orderOf(o inventory.Order) stockapi.Order {
	return stockapi.Order{
		ID: o.ID, SKU: o.SKU, Qty: o.Qty, Replica: o.Replica, Strategy: o.Strategy, Fence: o.Fence,
		At: o.At, Remaining: o.Remaining, Attempts: o.Attempts, Key: o.Key,
	}
}

// answerOf is a sale as the API answers it: remaining null when the sale
// does not know what it left (stockapi.Sale.Remaining says when).
func answerOf(sale inventory.Sale) stockapi.Sale {
	var remaining *int64
	if sale.Remaining >= 0 {
		remaining = &sale.Remaining
	}
	return stockapi.Sale{
		OrderID: sale.OrderID, SKU: sale.SKU, Qty: sale.Qty, Remaining: remaining,
		Strategy: sale.Strategy, Replica: sale.Replica, Fence: sale.Fence, Attempts: sale.Attempts,
		At: sale.At, Recorded: sale.LedgerErr == nil, IdempotencyKey: sale.Key,
	}
}
