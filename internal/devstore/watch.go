package devstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// ErrStoreNotAnswering says that a MongoDB stopped answering: Watch's
// read of one document went unanswered for the whole of its limit.
var ErrStoreNotAnswering = errors.New("the store stopped answering")

// How Watch watches: a read every WatchEvery, each given watchReadTimeout.
const (
	WatchEvery       = time.Second
	watchReadTimeout = 3 * time.Second
)

// Watch reads one document from m every WatchEvery until ctx is done, and
// returns nil then. At the first read that is not answered it says so
// through logf; once none has been answered for limit, it returns an error
// wrapping ErrStoreNotAnswering that says for how long and, for the
// embedded FerretDB, what its gate holds. At its end it says how many
// reads were answered and the slowest.
func (m *Mongo) Watch(ctx context.Context, limit time.Duration, logf func(string, ...any)) error {
	c, err := mongo.Connect(options.Client().ApplyURI(m.URI).SetAppName("devstore-watch").
		SetMaxPoolSize(2).SetServerSelectionTimeout(watchReadTimeout))
	if err != nil {
		return fmt.Errorf("devstore: watch the store: %w", err)
	}
	defer func() { _ = c.Disconnect(context.Background()) }()
	coll := c.Database("devstore_watch").Collection("watch")

	t := time.NewTicker(WatchEvery)
	defer t.Stop()
	var (
		since           time.Time // of the first unanswered read in a row
		reads, answered int
		slowest         time.Duration
	)
	defer func() {
		if reads > 0 {
			logf("  the store answered %d of %d reads made directly, not through a replica, every %s; the slowest in %s",
				answered, reads, WatchEvery, slowest.Round(time.Millisecond))
		}
	}()
	for {
		rctx, cancel := context.WithTimeout(ctx, watchReadTimeout)
		t0 := time.Now()
		err := coll.FindOne(rctx, bson.D{{Key: "_id", Value: "watch"}}).Err()
		took := time.Since(t0)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		reads++
		slowest = max(slowest, took)
		switch {
		case err == nil || errors.Is(err, mongo.ErrNoDocuments):
			answered++
			if !since.IsZero() {
				logf("  the store answers again, after %s", time.Since(since).Round(time.Second))
			}
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
			logf("  the store did not answer a read in %s (%v); the run stops if it does not answer for %s", watchReadTimeout, err, limit)
		case time.Since(since) >= limit:
			why := fmt.Sprintf("no read answered for %s (the last: %v)", time.Since(since).Round(time.Second), err)
			if st, ok := m.GateStats(); ok {
				why += fmt.Sprintf("; the gate: %d client connections, %d requests in FerretDB, %d documents held or waited for, %d writes cut after the hung-write limit",
					st.Conns, st.InFlight, st.Documents, st.Abandoned)
			}
			return fmt.Errorf("%w: %s", ErrStoreNotAnswering, why)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
