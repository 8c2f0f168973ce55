package mongolock

import (
	"testing"

	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
)

// sharedMongoURI is the one MongoDB the package's tests share, each in a
// database of its own: starting the embedded FerretDB (and its PostgreSQL)
// costs seconds of CPU, once instead of once a test.
// TestTokensSurviveRestart, which restarts its server, starts its own.
var sharedMongoURI string

func TestMain(m *testing.M) {
	devstoretest.Main(m, devstoretest.SharedMongo, func(s devstoretest.Shared) { sharedMongoURI = s.MongoURI })
}

// SharedMongoURI is sharedMongoURI, for the external tests.
func SharedMongoURI() string { return sharedMongoURI }
