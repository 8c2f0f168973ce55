package mongostore

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
)

// TestPassesEndOnSilentLink: once the store's link goes silent (packets
// dropped, no reset), a heartbeat and each recovery pass return an error
// by their deadlines instead of blocking the next pass for ever.
func TestPassesEndOnSilentLink(t *testing.T) {
	t.Parallel() // its own database (or server); it mostly waits
	base := testStore(t)
	p := devstoretest.MongoProxy(t, mongoURI)
	c, err := mongo.Connect(options.Client().ApplyURI("mongodb://" + p.Addr() + "/?directConnection=true"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = c.Disconnect(ctx)
	})
	s, err := NewStore(c.Database(base.items.Database().Name()), StoreOptions{Replica: "cut", DeadAfter: time.Second, WriteTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	mustPut(t, base, "cut", 1)
	if _, err := s.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecoverKeys(ctx); err != nil {
		t.Fatal(err)
	}
	p.Silence()
	passes := map[string]func() error{
		"Heartbeat":      func() error { _, err := s.Heartbeat(ctx); return err },
		"RecoverPending": func() error { _, err := s.RecoverPending(ctx, 0); return err },
		"RecoverKeys":    func() error { _, err := s.RecoverKeys(ctx); return err },
	}
	for name, pass := range passes {
		done := make(chan error, 1)
		go func() { done <- pass() }()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s on a silent link: %v, want its deadline exceeded", name, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s on a silent link still blocked after a minute", name)
		}
	}
}
