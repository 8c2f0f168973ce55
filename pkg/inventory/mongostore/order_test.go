package mongostore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"

	"github.com/stocklock/stocklock/pkg/strategy"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
)

// TestOrderInsertSurvivesRestart restarts a MongoDB-compatible server
// under clients that have pooled connections. The ledger insert that meets
// the cut connection must still record its order, exactly once, because
// the stock of that sale is already taken; a fenced read that meets one
// must say "unavailable, try again".
//
// Whether an operation meets the cut depends on the driver: a heartbeat
// that meets it first clears the pool, and the operation then dials afresh.
// So the test watches each client's commands and counts an attempt only
// when its command failed on the network, restarting again (at most
// maxRestarts times) until both have.
func TestOrderInsertSurvivesRestart(t *testing.T) {
	t.Parallel()                // its own database (or server); it mostly waits
	mg := devstoretest.Mongo(t) // a server of its own: the restart must not hit other tests
	if mg.Kind != devstore.KindFerretDB {
		t.Skipf("needs a server the test can restart; this one is %s", mg.Kind)
	}
	// connect returns a client that records its commands that failed on
	// the network, by command name. Its heartbeat is made rare, so that
	// most restarts are met by the operations themselves.
	connect := func() (*mongo.Client, *netFailures) {
		f := &netFailures{}
		c, err := mongo.Connect(options.Client().ApplyURI(mg.URI).
			SetServerMonitoringMode(options.ServerMonitoringModePoll).
			SetHeartbeatInterval(time.Hour).
			SetMonitor(&event.CommandMonitor{Failed: f.record}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			// t.Context is already cancelled when cleanups run.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = c.Disconnect(ctx)
		})
		return c, f
	}
	logger := slog.New(slog.NewTextHandler(t.Output(), nil))
	writer, writerFails := connect()
	s, err := NewStore(writer.Database("ledger"), StoreOptions{Replica: "r", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	reader, readerFails := connect()
	rs, err := NewStore(reader.Database("ledger"), StoreOptions{Replica: "r", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Put(t.Context(), "fenced-sku", 3); err != nil {
		t.Fatal(err)
	}

	const maxRestarts = 3
	insertMet, readMet := false, false
	for i := 1; i <= maxRestarts && !(insertMet && readMet); i++ {
		// Open a pooled connection on each client, then cut them all.
		sku := fmt.Sprintf("sku-%d", i)
		if _, err := s.insertOrder(t.Context(), inventory.Order{ID: "warm-" + sku, SKU: "w", Qty: 1, Replica: "r"}); err != nil {
			t.Fatal(err)
		}
		if _, err := rs.FencedRead(t.Context(), "fenced-sku", strategy.RedisLock, int64(10*i)); err != nil {
			t.Fatal(err)
		}
		writerFails.reset()
		readerFails.reset()
		if err := mg.Restart(t.Context()); err != nil {
			t.Fatal(err)
		}

		// A fenced read sold nothing (it writes only the token): on a cut
		// connection it must say "unavailable, try again", not look like
		// a bug. (A plain read would not show it: the driver retries reads.)
		_, err := rs.FencedRead(t.Context(), "fenced-sku", strategy.RedisLock, int64(10*i+1))
		if readerFails.count("findAndModify") > 0 {
			readMet = true
			if !errors.Is(err, inventory.ErrStoreUnavailable) {
				t.Errorf("fenced read on a connection the restart cut: %v, want inventory.ErrStoreUnavailable", err)
			}
		}

		o := inventory.Order{ID: "after-restart-" + sku, SKU: sku, Qty: 2, Replica: "r", Strategy: strategy.Atomic}
		if _, err := s.insertOrder(t.Context(), o); err != nil {
			t.Fatalf("order insert after a restart: %v", err)
		}
		if writerFails.count("insert") > 0 {
			insertMet = true
		}
		if n := mustCount(t, s, sku); n != 1 {
			t.Fatalf("the ledger holds %d orders of %s, want exactly 1", n, sku)
		}
		t.Logf("restart %d: the insert met the cut: %t; the fenced read met it: %t", i, insertMet, readMet)
	}
	// The premise: without it the test above proved nothing.
	if !insertMet || !readMet {
		t.Fatalf("in %d restarts the fault did not bite (insert met a cut connection: %t, fenced read: %t)",
			maxRestarts, insertMet, readMet)
	}
}

// netFailures counts a client's commands that failed on the network.
type netFailures struct {
	mu     sync.Mutex
	byName map[string]int
}

func (f *netFailures) record(_ context.Context, e *event.CommandFailedEvent) {
	if !mongo.IsNetworkError(e.Failure) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byName == nil {
		f.byName = make(map[string]int)
	}
	f.byName[e.CommandName]++
}

func (f *netFailures) count(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byName[name]
}

func (f *netFailures) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.byName = nil
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
		mine    bool // the insert is known to be this call's
	}{
		{"first try", []error{nil}, nil, 1, true},
		{"cut, then landed", []error{network, nil}, nil, 2, true},
		{"cut, reply lost, then duplicate", []error{network, dup}, nil, 2, true},
		{"duplicate at once: a recovering replica recorded it first", []error{dup}, nil, 1, false},
		{"not transient: no retry", []error{denied}, denied, 1, false},
		{"always cut: gives up", []error{network, network, network, network, network, network, network}, network, orderInsertAttempts, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			mine, err := retryInsert(t.Context(), func(context.Context) error {
				calls++
				return c.errs[calls-1]
			})
			if calls != c.calls {
				t.Errorf("%d attempts, want %d", calls, c.calls)
			}
			if mine != c.mine {
				t.Errorf("mine = %v, want %v", mine, c.mine)
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
	if _, err := retryInsert(ctx, func(context.Context) error { return network }); !errors.Is(err, context.Canceled) {
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
