package mongolock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/stocklock/stocklock/pkg/lock"
)

// TestDuplicateKeyIsNotAcquired makes another owner win the key between
// TryAcquire's read and its grant, so that the grant's upsert meets the
// duplicate-key error: TryAcquire must answer ErrNotAcquired, and nothing
// else, both for a key whose document exists and for a brand-new key.
func TestDuplicateKeyIsNotAcquired(t *testing.T) {
	c, err := mongo.Connect(options.Client().ApplyURI(sharedMongoURI))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	coll := c.Database("ml_dupkey_" + hex.EncodeToString(suffix[:])).Collection("locks")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	holder, err := New(coll)
	if err != nil {
		t.Fatal(err)
	}
	free, err := holder.TryAcquire(ctx, "released", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Release(ctx, "released", "holder", free); err != nil {
		t.Fatal(err)
	}

	for _, key := range []string{"released", "brand-new"} {
		t.Run(key, func(t *testing.T) {
			contender, err := New(coll)
			if err != nil {
				t.Fatal(err)
			}
			var won error
			contender.beforeGrant = func() { _, won = holder.TryAcquire(ctx, key, "holder", time.Minute) }
			_, err = contender.TryAcquire(ctx, key, "contender", time.Minute)
			if won != nil {
				t.Fatalf("the other owner's TryAcquire between read and grant: %v", won)
			}
			if !errors.Is(err, lock.ErrNotAcquired) {
				t.Fatalf("TryAcquire that met a duplicate key = %v, want ErrNotAcquired", err)
			}
			var se mongo.ServerError
			if errors.Is(err, lock.ErrNotHeld) || errors.Is(err, lock.ErrInvalidArgument) || errors.As(err, &se) {
				t.Errorf("TryAcquire that met a duplicate key = %v: more than ErrNotAcquired", err)
			}
		})
	}
}
