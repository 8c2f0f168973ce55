package inventory

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/stocklock/stocklock/internal/devstore"
)

// TestOrderInsertSurvivesRestart restarts a MongoDB-compatible server
// under two clients that both have pooled connections. A plain insert on
// the first fails (the server cut its connection): that is the fault. The
// ledger insert on the second must still record its order, exactly once,
// because the stock of that sale is already taken.
func TestOrderInsertSurvivesRestart(t *testing.T) {
	mg := devstore.MongoT(t) // a server of its own: the restart must not hit other tests
	if mg.Kind != devstore.KindFerretDB {
		t.Skipf("needs a server the test can restart; this one is %s", mg.Kind)
	}
	connect := func() *mongo.Client {
		c, err := mongo.Connect(options.Client().ApplyURI(mg.URI))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			// t.Context is already cancelled when cleanups run.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = c.Disconnect(ctx)
		})
		return c
	}
	control, client, reader := connect(), connect(), connect()
	db := client.Database("ledger")
	s, err := NewStore(db, StoreOptions{Replica: "r", Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctl := control.Database("ledger").Collection("control")
	// Open pooled connections on both clients.
	if _, err := ctl.InsertOne(t.Context(), bson.D{{Key: "_id", Value: "warm"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.insertOrder(t.Context(), Order{ID: "warm", SKU: "w", Qty: 1, Replica: "r"}); err != nil {
		t.Fatal(err)
	}

	rs, err := NewStore(reader.Database("ledger"), StoreOptions{Replica: "r", Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Put(t.Context(), "fenced-sku", 3); err != nil {
		t.Fatal(err)
	}

	if err := mg.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	// A fenced read on a cut connection sold nothing (it writes only the
	// token): it must say "unavailable, try again", not look like a bug.
	// (A plain read would not show it: the driver retries reads itself.)
	if _, err := rs.FencedRead(t.Context(), "fenced-sku", NameRedisLock, 7); !errors.Is(err, ErrStoreUnavailable) {
		t.Errorf("fenced read on a connection the restart cut: %v, want ErrStoreUnavailable", err)
	}
	// The premise: a restart cuts pooled connections, and a plain insert
	// fails. Without it the test below would prove nothing.
	if _, err := ctl.InsertOne(t.Context(), bson.D{{Key: "_id", Value: "after"}}); err == nil {
		t.Fatal("the control insert survived the restart: the fault did not bite, so the retry was not exercised")
	} else if !transient(err) {
		t.Fatalf("the control insert failed with an error that is not transient: %v", err)
	}

	o := Order{ID: "after-restart", SKU: "sku-1", Qty: 2, Replica: "r", Strategy: NameAtomic}
	if err := s.insertOrder(t.Context(), o); err != nil {
		t.Fatalf("order insert after a restart: %v", err)
	}
	n, err := s.CountOrders(t.Context(), "sku-1")
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("the ledger holds %d orders of sku-1, want exactly 1", n)
	}
}

// TestRetryInsert pins the retry policy with the driver's own error types:
// a passing error is retried, a duplicate key means recorded (by an
// earlier attempt whose reply was lost, or by a recovering replica), other
// errors are not retried.
func TestRetryInsert(t *testing.T) {
	network := mongo.CommandError{Code: 6, Message: "connection reset", Labels: []string{"NetworkError"}}
	dup := mongo.WriteException{WriteErrors: []mongo.WriteError{{Code: 11000, Message: "E11000 duplicate key"}}}
	denied := mongo.CommandError{Code: 13, Message: "unauthorized"}
	cases := []struct {
		name    string
		errs    []error // returned by the attempts in turn; nil: success
		wantErr error
		calls   int
	}{
		{"first try", []error{nil}, nil, 1},
		{"cut, then landed", []error{network, nil}, nil, 2},
		{"cut, reply lost, then duplicate", []error{network, dup}, nil, 2},
		{"duplicate at once: a recovering replica recorded it first", []error{dup}, nil, 1},
		{"not transient: no retry", []error{denied}, denied, 1},
		{"always cut: gives up", []error{network, network, network, network, network, network, network}, network, orderInsertAttempts},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			err := retryInsert(t.Context(), func(context.Context) error {
				calls++
				return c.errs[calls-1]
			})
			if calls != c.calls {
				t.Errorf("%d attempts, want %d", calls, c.calls)
			}
			if c.wantErr == nil && err != nil {
				t.Errorf("error %v, want none", err)
			}
			// The driver's error values hold slices: compare what they say.
			if c.wantErr != nil && (err == nil || !strings.Contains(err.Error(), c.wantErr.Error())) {
				t.Errorf("error %v, want %v", err, c.wantErr)
			}
		})
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := retryInsert(ctx, func(context.Context) error { return network }); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled while retrying: %v, want context.Canceled", err)
	}
}

// TestTransient: the errors that may pass by themselves, and one that
// does not.
func TestTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{mongo.CommandError{Code: 6, Labels: []string{"NetworkError"}}, true},
		{mongo.CommandError{Code: 1, Message: "sqlite: database is locked (5) (SQLITE_BUSY)"}, true},
		{mongo.CommandError{Code: 1, Message: "interrupted (9)"}, true},
		{mongo.CommandError{Code: 13, Message: "unauthorized"}, false},
	} {
		if got := transient(c.err); got != c.want {
			t.Errorf("transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
