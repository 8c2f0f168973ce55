package mongolock

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/stocklock/stocklock/pkg/lock"
)

// offline returns a collection of a client that cannot reach any server and
// gives up at once, so any call that does I/O fails with a driver error.
func offline(t *testing.T) *mongo.Collection {
	t.Helper()
	c, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1/").
		SetServerSelectionTimeout(50 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c.Database("db").Collection("locks")
}

func TestNewRejectsBadArguments(t *testing.T) {
	if _, err := New(nil); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("New(nil) = %v, want ErrInvalidArgument", err)
	}
	if _, err := NewLocker(nil); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("NewLocker(nil) = %v, want ErrInvalidArgument", err)
	}
	coll := offline(t)
	for name, opt := range map[string]Option{
		"negative skew":  WithSkew(-time.Second),
		"nil clock":      WithClock(nil),
		"unacknowledged": WithWriteConcern(writeconcern.Unacknowledged()),
	} {
		if _, err := New(coll, opt); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("New with %s = %v, want ErrInvalidArgument", name, err)
		}
	}
}

func TestDefaults(t *testing.T) {
	coll := offline(t)
	b, err := New(coll)
	if err != nil {
		t.Fatal(err)
	}
	if b.Skew() != DefaultSkew {
		t.Errorf("skew = %v, want DefaultSkew", b.Skew())
	}
}

// Bad arguments fail before any I/O: the offline client would answer with a
// server-selection error.
func TestBadArgumentsBeforeIO(t *testing.T) {
	b, err := New(offline(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	cases := []struct {
		name       string
		key, owner string
		ttl        time.Duration
	}{
		{"empty key", "", "o", time.Second},
		{"long key", string(make([]byte, lock.MaxKeyLen+1)), "o", time.Second},
		{"empty owner", "k", "", time.Second},
		{"zero ttl", "k", "o", 0},
		{"negative ttl", "k", "o", -time.Second},
	}
	for _, c := range cases {
		if _, err := b.TryAcquire(ctx, c.key, c.owner, c.ttl); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("%s: TryAcquire = %v, want ErrInvalidArgument", c.name, err)
		}
		if err := b.Refresh(ctx, c.key, c.owner, 1, c.ttl); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("%s: Refresh = %v, want ErrInvalidArgument", c.name, err)
		}
		if c.ttl > 0 {
			if err := b.Release(ctx, c.key, c.owner, 1); !errors.Is(err, lock.ErrInvalidArgument) {
				t.Errorf("%s: Release = %v, want ErrInvalidArgument", c.name, err)
			}
		}
	}
	// A token no server can hold is not held.
	if err := b.Release(ctx, "k", "o", 1<<63); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Release of token 2^63 = %v, want ErrNotHeld", err)
	}
}

func TestExpiryRoundsUp(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 1, time.UTC) // 1ns past a millisecond
	if got, want := expiry(now, time.Second), now.Add(time.Second).Truncate(time.Millisecond).Add(time.Millisecond); !got.Equal(want) {
		t.Errorf("expiry = %v, want %v", got, want)
	}
	exact := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := expiry(exact, time.Second); !got.Equal(exact.Add(time.Second)) {
		t.Errorf("expiry of an exact millisecond = %v, want %v", got, exact.Add(time.Second))
	}
}
