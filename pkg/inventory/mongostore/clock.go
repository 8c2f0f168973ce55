package mongostore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// The clock rule: every time that a safety decision compares is the
// store's (MongoDB's) clock, never a replica's. A key's and an attempt's
// at are stamped with an upper estimate of the store's clock at the
// write, and key expiry (expireKeys, and MongoDB's TTL monitor, which runs
// on the server's clock) and AbandonAfter compare them with a lower
// estimate of it: an error of the estimate only ever delays an expiry or a
// give-up, never hastens it. Liveness (see liveness) compares no times at
// all across machines: only how far this process's monotonic clock moved
// between two of its own readings.
//
// The estimate is the server's localTime, as hello answers it, plus the
// time this process's monotonic clock measured since: since the hello was
// sent for the upper estimate, since its answer came back for the lower.
// The server read its clock between the two, so the true store time lies
// between the estimates, up to the clocks' rates, which a drift allowance
// covers. This process's wall clock is never read for it.

// clockRefresh is how old an estimate of the store's clock may grow before
// the next use reads the server's clock again. It decides when, never
// whether: the drift allowance widens an older estimate, by 1 ms each side
// every 2 s, and a held unit is sold again only once the lower estimate
// passes the upper one its hold was stamped with: 5 s keeps the allowance
// under 2.5 ms a side, for one hello every 5 s.
const clockRefresh = 5 * time.Second

// clockRetry is how long after a failed read of the server's clock the
// next use tries again; meanwhile, and whenever a read fails, the
// estimates come from the last reading, which stays sound (its allowance
// grows with the time elapsed since it).
const clockRetry = time.Second

// maxDrift bounds how much faster or slower this process's monotonic
// clock runs than the store's clock: 500 ppm, what NTP slews at most and
// far above what a crystal drifts.
const maxDrift = 2000 // 1/maxDrift of the elapsed time

// storeClock is one reading of the store's clock: the server's localTime,
// and this process's clock readings (only their monotonic part is used)
// just before the hello was sent and just after its answer came.
// refreshing is set while a caller reads the server's clock again; the
// others use the reading they have meanwhile (the drift allowance keeps
// it sound), so that no caller waits on another's hello. failed is this
// process's clock when a read of the server's clock last failed.
type storeClock struct {
	mu             sync.Mutex
	server         time.Time
	sent, received time.Time
	refreshing     bool
	failed         time.Time
}

// serverTime reads the store's clock with hello (FerretDB and MongoDB both
// answer its localTime). local is this process's clock; only the
// monotonic part of its readings is used.
func serverTime(ctx context.Context, db *mongo.Database, local func() time.Time) (server, sent, received time.Time, err error) {
	var hello struct {
		LocalTime bson.DateTime `bson:"localTime"`
	}
	sent = local()
	err = db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello)
	received = local()
	if err == nil && hello.LocalTime == 0 {
		err = errors.New("hello answered no localTime")
	}
	if err != nil {
		return time.Time{}, time.Time{}, time.Time{}, fmt.Errorf("read the store's clock: %w", err)
	}
	return hello.LocalTime.Time().UTC(), sent, received, nil
}

// storeTime returns an estimate of the store's clock now: with upper, a
// time no earlier than the store's clock (for stamps); without, one no
// later (for the "now" an expiry compares stamps with). It reads the
// server's clock first when it has no reading yet, or when its reading is
// older than clockRefresh, no other caller is reading it already and no
// read failed in the last clockRetry (which says why a failed read leaves
// the last reading in use). Only without any reading is the failure the
// caller's error, which says what failed and leaves the operation's
// context to the caller.
func (s *Store) storeTime(ctx context.Context, upper bool) (time.Time, error) {
	c := s.clock
	c.mu.Lock()
	now := s.now()
	stale := c.server.IsZero() || (now.Sub(c.received) >= clockRefresh && !c.refreshing &&
		(c.failed.IsZero() || now.Sub(c.failed) >= clockRetry))
	if stale {
		c.refreshing = true
	}
	c.mu.Unlock()
	if stale {
		server, sent, received, err := serverTime(ctx, s.keys.Database(), s.now)
		c.mu.Lock()
		c.refreshing = false
		switch {
		case err != nil:
			c.failed = s.now()
		case received.After(c.received) && narrower(received.Sub(sent), c.received.Sub(c.sent), received.Sub(c.received)):
			c.server, c.sent, c.received = server, sent, received
		}
		have := !c.server.IsZero()
		c.mu.Unlock()
		switch {
		case err != nil && !have:
			return time.Time{}, err
		case err != nil:
			s.logger.WarnContext(ctx, "could not read the store's clock again: the last reading stays in use", slog.Any("error", err))
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now = s.now()
	if upper {
		// localTime is whole milliseconds, truncated.
		elapsed := now.Sub(c.sent)
		return ceilMillis(c.server.Add(elapsed + elapsed/maxDrift + time.Millisecond)), nil
	}
	elapsed := now.Sub(c.received)
	return c.server.Add(elapsed - elapsed/maxDrift).Truncate(time.Millisecond), nil
}

// narrower reports whether a new reading whose hello took rtt bounds the
// store's clock at least as tightly as the last one, whose hello took
// last, now that age has passed since it: the last one's bounds have
// widened by its drift allowance on each side. A slow hello (a loaded
// store) so leaves a better reading in use.
func narrower(rtt, last, age time.Duration) bool {
	return rtt <= last+2*(age/maxDrift)
}

// ceilMillis rounds t up to a whole millisecond, which BSON dates hold.
func ceilMillis(t time.Time) time.Time {
	if r := t.Truncate(time.Millisecond); !r.Equal(t) {
		return r.Add(time.Millisecond)
	}
	return t
}
