package strategy

// The steps of a sale under a lock (pkg/inventory/mongostore.Locked), as
// inventory.StepObserver and the service's metrics name them.
const (
	// StepLock is the acquisition of the item's lease: this replica's
	// queue for the item and the lock service's grant, waiting included.
	StepLock = "lock"
	// StepRead is the fenced read (a store write: it registers the
	// token), or the plain read when fencing is off.
	StepRead = "read"
	// StepWrite is the stock write: the fenced write with its token and
	// version condition, which also stores the order as pending.
	StepWrite = "write"
	// StepLedger is the order's insert into the ledger, after the release.
	StepLedger = "ledger"
	// StepUnpend removes the order's pending entry from the item, after
	// the ledger insert.
	StepUnpend = "unpend"
	// StepRelease gives the lease back.
	StepRelease = "release"
)

// SaleSteps lists the steps in the order a sale takes them.
var SaleSteps = []string{StepLock, StepRead, StepWrite, StepRelease, StepLedger, StepUnpend}

// HeldSteps are the steps that run while the lease is held, one holder
// after the other: no two sales of one item overlap in them. The time of
// one sale's HeldSteps bounds a hot item's sales per second from above:
// from the moment a holder learns of its grant, it reads, writes and
// releases, and the next holder cannot learn of its own grant sooner than
// the release's round trip allows (half of it to free the lock at the lock
// service, at least half of one to tell the next holder). The lock step is
// not among them: its time is mostly the wait for the other holders, which
// is the serialisation itself, not a cost of it; the ledger and unpend
// steps run after the release.
var HeldSteps = []string{StepRead, StepWrite, StepRelease}

// LockKey returns the lock key of sku's item.
func LockKey(sku string) string { return "item/" + sku }
