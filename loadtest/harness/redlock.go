package harness

import (
	"slices"

	"github.com/stocklock/stocklock/pkg/strategy"
)

// UsesRedlock reports whether the runs of c need the redlock servers: a
// chosen strategy takes its leases from them.
func (c Config) UsesRedlock() bool {
	return slices.ContainsFunc(c.Strategies, func(name string) bool {
		in, ok := strategy.Lookup(name)
		return ok && in.Lock == strategy.LockRedlock
	})
}
