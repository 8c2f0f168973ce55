package mongostore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// DefaultDeadAfter is StoreOptions.DeadAfter's default.
const DefaultDeadAfter = 5 * time.Second

// heartbeat is one Store's sign of life, one document in the heartbeats
// collection (doc.go, "Heartbeats", says what each field means; liveness
// how the others judge it).
type heartbeat struct {
	Instance  string    `bson:"_id"`
	Replica   string    `bson:"replica"`
	Beat      int64     `bson:"beat"`
	DeadAfter int64     `bson:"dead_after_ms,omitempty"`
	At        time.Time `bson:"at"`
	Stopped   bool      `bson:"stopped,omitempty"`
}

// liveness is what one store has seen of the others' heartbeats.
//
// An instance is dead when its beat stood still between two of this
// store's own readings at least deadAfter apart: the judgement rests on
// readings, not on the time now. A store whose own readings stalled (a
// long recovery pass, a slow store, a pause) has seen nothing stand still
// since, and takes nobody for dead until it reads the heartbeats again.
//
// The server reads the heartbeats at some moment between the sending of
// the find and the arrival of its answer, so each reading is stamped at
// both ends, by this process's monotonic clock: a beat is known to have
// stood still from the answer of the first reading that saw it to the
// sending of the latest one. A pause on either side of the read (GC, CPU
// starvation, SIGSTOP) can only shorten that span, never lengthen it.
type liveness struct {
	mu   sync.Mutex
	seen map[string]*beatSeen // by instance
	last time.Time            // when this store's latest reading was sent
}

type beatSeen struct {
	beat    int64
	since   time.Time // when the answer of the first reading of beat came
	stopped bool      // the instance has left (see Store.Leave)
	told    bool      // observe has counted this instance as dead
}

// observe records the heartbeats of a reading sent at sent whose answer
// came at received, forgets the instances whose document is gone, and
// returns how many instances other than self it finds dead for the first
// time.
//
// At the first observation, the other instances of this store's own
// replica name are dead at once: they are this replica before a restart
// (replica names are unique, one process each), and nothing of theirs is
// in flight any more. So is an instance that has left (Store.Leave).
func (l *liveness) observe(sent, received time.Time, hbs []heartbeat, deadAfter time.Duration, self heartbeat) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	first := l.seen == nil
	if first {
		l.seen = map[string]*beatSeen{}
	}
	if sent.After(l.last) {
		l.last = sent
	}
	present := make(map[string]bool, len(hbs))
	for _, hb := range hbs {
		present[hb.Instance] = true
		if b := l.seen[hb.Instance]; b == nil || b.beat != hb.Beat || b.stopped != hb.Stopped {
			since := received
			if hb.Instance != self.Instance && (hb.Stopped || first && hb.Replica == self.Replica) {
				since = l.last.Add(-deadAfter)
			}
			l.seen[hb.Instance] = &beatSeen{beat: hb.Beat, since: since, stopped: hb.Stopped}
		}
	}
	died := 0
	for id, b := range l.seen {
		switch {
		case !present[id]:
			delete(l.seen, id)
		case id != self.Instance && !b.told && l.stoodStill(b, deadAfter):
			b.told = true
			died++
		}
	}
	return died
}

// dead reports whether instance's heartbeat stood still for deadAfter
// between this store's readings. An instance never seen beating is not
// dead: its attempts wait for AbandonAfter.
func (l *liveness) dead(instance string, deadAfter time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.seen[instance]
	return b != nil && l.stoodStill(b, deadAfter)
}

// stoodStill reports whether b's beat stood still for deadAfter up to
// this store's latest reading. l.mu must be held.
func (l *liveness) stoodStill(b *beatSeen, deadAfter time.Duration) bool {
	return l.last.Sub(b.since) >= deadAfter
}

// deadBeats returns the instances other than self taken for dead, with the
// beat each was last seen at.
func (l *liveness) deadBeats(deadAfter time.Duration, self string) map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int64{}
	for id, b := range l.seen {
		if id != self && l.stoodStill(b, deadAfter) {
			out[id] = b.beat
		}
	}
	return out
}

// Heartbeat tells the other stores on the database that this one is alive,
// and reads their heartbeats. It returns how many stores it has just found
// dead: their heartbeat has stood still for DeadAfter, timed by this
// process's monotonic clock between its own readings (see liveness).
// Their idempotency attempts may then be given up at once (RecoverKeys
// does), instead of after AbandonAfter. A call ends by half of DeadAfter
// (at least a second): on a link that went silent it fails in time for
// the next call to beat on a fresh connection before the others take this
// store for dead.
//
// Call it every DeadAfter/5 or so while the store serves DecrementOnce: a
// store that stops calling it is taken for dead, and its keyed requests in
// flight are given up, which is safe (their stock writes are then refused)
// but fails them. A store that never calls it is never taken for dead.
// The first call takes the earlier instances of this store's own replica
// name for dead at once: a restarted replica settles what its previous
// process left in flight without waiting DeadAfter. So two processes must
// not share a replica name, or the start of one fails the other's keyed
// requests in flight (safely: a retry sells); CheckPeers refuses it.
func (s *Store) Heartbeat(ctx context.Context) (died int, err error) {
	ctx, cancel := context.WithTimeout(ctx, max(s.deadAfter/2, time.Second))
	defer cancel()
	_, err = s.beats.UpdateOne(ctx, bson.D{{Key: "_id", Value: s.instance}},
		bson.D{
			{Key: "$inc", Value: bson.D{{Key: "beat", Value: int64(1)}}},
			{Key: "$set", Value: bson.D{{Key: "replica", Value: s.replica}, {Key: "dead_after_ms", Value: s.deadAfter.Milliseconds()}}},
			{Key: "$currentDate", Value: bson.D{{Key: "at", Value: true}}},
		}, options.UpdateOne().SetUpsert(true))
	if err != nil {
		return 0, fmt.Errorf("inventory: heartbeat of %s: %w", s.replica, err)
	}
	hbs, sent, received, err := s.readBeats(ctx)
	if err != nil {
		return 0, err
	}
	return s.live.observe(sent, received, hbs, s.deadAfter, heartbeat{Instance: s.instance, Replica: s.replica}), nil
}

// readBeats reads every heartbeat, and this process's clock just before
// the find was sent and just after its answer came back.
func (s *Store) readBeats(ctx context.Context) (hbs []heartbeat, sent, received time.Time, err error) {
	sent = s.now()
	if hbs, err = findDocs[heartbeat](ctx, s.beats, bson.D{}); err != nil {
		return nil, sent, received, fmt.Errorf("inventory: read heartbeats: %w", err)
	}
	if s.afterBeatRead != nil {
		s.afterBeatRead()
	}
	return hbs, sent, s.now(), nil
}

// Errors of CheckPeers.
var (
	// ErrReplicaInUse: a live process beats under this store's replica
	// name. Two processes with one name would take each other's in-flight
	// keyed requests for those of a dead predecessor and fail them.
	ErrReplicaInUse = errors.New("inventory: replica name in use by a live process")
	// ErrDeadAfterDiffers: a live store beats with another DeadAfter.
	// Stores that differ take each other for dead (a short DeadAfter
	// against a long beat interval) and fail each other's keyed requests.
	ErrDeadAfterDiffers = errors.New("inventory: heartbeat timeout differs from the live replicas'")
)

// CheckPeers refuses to let this store join stores it would harm: it
// returns ErrReplicaInUse if a live store beats under this store's replica
// name, and ErrDeadAfterDiffers if a live store beats with another
// DeadAfter. Call it once at start-up, before the first Heartbeat.
//
// A store is live if its beat advances while this one watches. Only the
// heartbeats that would conflict are watched, for two of their beat
// intervals (two fifths of their DeadAfter): a replica restarted after
// its predecessor was killed waits that long (2 s at the default
// DeadAfter) before it starts; with no conflicting heartbeat, or a
// predecessor that stopped cleanly (Leave), there is no wait. A
// predecessor that is paused, not dead, is not seen beating and does not
// stop the start: its keyed requests are fenced out as a dead replica's
// are. Two processes that start with one name at the same moment are not
// caught.
func (s *Store) CheckPeers(ctx context.Context) error {
	hbs, _, _, err := s.readBeats(ctx)
	if err != nil {
		return err
	}
	watch := map[string]heartbeat{}
	window := time.Duration(0)
	for _, hb := range hbs {
		if hb.Instance == s.instance || hb.Stopped || (hb.Replica != s.replica && (hb.DeadAfter == 0 || hb.DeadAfter == s.deadAfter.Milliseconds())) {
			continue
		}
		watch[hb.Instance] = hb
		window = max(window, 2*time.Duration(hb.DeadAfter)*time.Millisecond/5, 2*s.deadAfter/5)
	}
	if len(watch) == 0 {
		return nil
	}
	if err := pause(ctx, window); err != nil {
		return err
	}
	now, _, _, err := s.readBeats(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, hb := range now {
		was, ok := watch[hb.Instance]
		if !ok || hb.Beat == was.Beat {
			continue
		}
		if hb.Replica == s.replica {
			errs = append(errs, fmt.Errorf("%w: replica %q beat %d times in %v; give each process a name of its own",
				ErrReplicaInUse, s.replica, hb.Beat-was.Beat, window))
		} else {
			errs = append(errs, fmt.Errorf("%w: replica %q uses %v, this one %v; give every replica the same",
				ErrDeadAfterDiffers, hb.Replica, time.Duration(hb.DeadAfter)*time.Millisecond, s.deadAfter))
		}
	}
	return errors.Join(errs...)
}

// Leave tells the other stores that this one has stopped for good: they
// take it for dead at once, and settle its idempotency attempts that are
// left (those whose outcome was unknown) without waiting DeadAfter, and a
// successor of its replica name starts without watching its heartbeat
// (see CheckPeers). Call it last, once no request runs on the store and
// Heartbeat is no longer called.
func (s *Store) Leave(ctx context.Context) error {
	_, err := s.beats.UpdateOne(ctx, bson.D{{Key: "_id", Value: s.instance}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "stopped", Value: true}}}})
	if err != nil {
		return fmt.Errorf("inventory: mark heartbeat of %s stopped: %w", s.replica, err)
	}
	return nil
}

// forgetDead deletes the heartbeats of dead instances that have no
// attempt left, if they still stand where they were seen: a paused
// instance that wakes beats again and is alive anew.
func (s *Store) forgetDead(ctx context.Context, withAttempts map[string]bool) {
	for id, beat := range s.live.deadBeats(s.deadAfter, s.instance) {
		if withAttempts[id] {
			continue
		}
		if _, err := s.beats.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "beat", Value: beat}}); err != nil {
			s.logger.WarnContext(ctx, "could not delete a dead replica's heartbeat; the next recovery will", "instance", id, "error", err)
		}
	}
}
