package mongostore

import (
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
)

// Via returns the same store, whose operations go through db instead: a
// handle on the same database from another client, with a connection
// pool of its own. It is the same instance (the same heartbeat, the same
// idempotency attempts in flight, the same view of the other stores'
// liveness, the same skus with holds, the same estimate of the store's
// clock): what Heartbeat learns through one, RecoverKeys uses through
// the other. A replica sends its heartbeats, recovery passes and admin
// requests through clients of their own, so that sales that take every
// connection of theirs cannot delay them (docs/overload.md).
func (s *Store) Via(db *mongo.Database) *Store {
	v := *s
	v.bind(db)
	return &v
}

// bind points the store's collections at db, with its write concern.
func (s *Store) bind(db *mongo.Database) {
	co := options.Collection().SetWriteConcern(s.wc)
	committed := options.Collection().SetWriteConcern(s.wc)
	if s.wc.W == "majority" {
		committed.SetReadConcern(readconcern.Majority())
	}
	s.committedItems = db.Collection(ItemsCollection, committed)
	s.committedOrders = db.Collection(OrdersCollection, committed)
	s.items = db.Collection(ItemsCollection, co)
	s.orders = db.Collection(OrdersCollection, co)
	s.keys = db.Collection(IdempotencyCollection, co)
	s.attempts = db.Collection(AttemptsCollection, co)
	s.beats = db.Collection(HeartbeatsCollection, co)
	s.holds = db.Collection(HoldsCollection, co)
}
