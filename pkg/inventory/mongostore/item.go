package mongostore

import (
	"go.mongodb.org/mongo-driver/v2/bson"
)

// abortedPath is the item field that marks order id as given up.
func abortedPath(id string) string { return "aborted." + id }

// notAborted is the condition every stock write carries: the order it
// records has not been given up. With it, giving up an attempt and its
// write landing are decided by one document, whatever the clocks say.
func notAborted(id string) bson.E {
	return bson.E{Key: abortedPath(id), Value: bson.D{{Key: "$exists", Value: false}}}
}
