package server

import "github.com/stocklock/stocklock/pkg/inventory"

// SetAfterTake sets the hook that runs between a sale's stock write and its
// ledger write (inventory.StoreOptions.AfterTake), for tests that stop a
// replica there.
func SetAfterTake(c *Config, f func(inventory.Order)) { c.afterTake = f }
