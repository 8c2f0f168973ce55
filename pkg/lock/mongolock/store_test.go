package mongolock_test

import "github.com/stocklock/stocklock/pkg/lock/mongolock"

// mongoURI is the server under test, shared by the package's tests (see
// TestMain): MONGO_URI if set, else an embedded FerretDB behind the
// per-document gate (see internal/devstore).
func mongoURI() string { return mongolock.SharedMongoURI() }
