package mongolock_test

import (
	"testing"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
)

// newStore returns the server under test: MONGO_URI if set, else an
// embedded FerretDB behind the per-document gate (see internal/devstore).
func newStore(tb testing.TB) *devstore.Mongo {
	tb.Helper()
	m := devstoretest.Mongo(tb)
	tb.Logf("MongoDB: %s at %s", m.Kind, m.URI)
	return m
}
