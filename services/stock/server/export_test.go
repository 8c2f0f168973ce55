package server

import (
	"net/http"

	"go.mongodb.org/mongo-driver/v2/event"

	"github.com/stocklock/stocklock/pkg/inventory"
)

// SetAfterTake sets the hook that runs between a sale's stock write and its
// ledger write (mongostore.StoreOptions.AfterTake), for tests that stop a
// replica there.
func SetAfterTake(c *Config, f func(inventory.Order)) { c.afterTake = f }

// SetHandlerWrapper sets a wrapper of the replica's handlers, for the
// contract check of every request and answer.
func SetHandlerWrapper(c *Config, f func(http.Handler) http.Handler) { c.wrapHandler = f }

// SetBeforeKeysPass sets a hook that runs before each pass that settles
// idempotency keys, for tests that hold such a pass.
func SetBeforeKeysPass(c *Config, f func()) { c.beforeKeysPass = f }

// SetCommandMonitor gives each of the replica's MongoDB clients the
// command monitor f returns for its role: "sales", "control" or
// "background".
func SetCommandMonitor(c *Config, f func(role string) *event.CommandMonitor) { c.monitor = f }

// PrepareAttempts is how many times start-up tries a step that prepares
// the store before it fails.
const PrepareAttempts = prepareAttempts
