package drill

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/loadtest/env"
	"github.com/stocklock/stocklock/pkg/lock/redlock"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// RedlockPartition is Kleppmann's scenario against the redlock strategy
// (see PartitionRedlock), and a minority of the servers stopped.
const RedlockPartition = "redlock-partition"

// redlockDrills: Kleppmann's double grant with fencing on, and off as a
// demonstration, and two of the five servers stopped without a clock step
// (the failure a Redlock is built to survive). The holders stall as in
// clockJumpDrills, but longer: the next replica's grant waits for its
// clients to drop their connections to the restarted servers (they do not
// retry, so each stale connection costs one failed attempt).
func redlockDrills() []Drill {
	stall := []string{"--write-stall=1500ms"}
	off := append([]string{"--fencing=false"}, stall...)
	return []Drill{
		{Label: "redlock partition + clock +10s", Strategy: strategy.Redlock, Flags: Flags{All: stall}, Inject: PartitionRedlock(clockJump)},
		{Label: "redlock partition + clock +10s, fencing off", Strategy: strategy.Redlock, Demo: true, Flags: Flags{All: off}, Inject: PartitionRedlock(clockJump)},
		{Label: "redlock 2 of 5 stopped", Strategy: strategy.Redlock, Flags: Flags{All: stall}, Inject: PartitionRedlock(0)},
	}
}

// redlockServers are the env's redlock servers, with a client each that
// does not retry (as the replicas' clients).
type redlockServers struct {
	srv     []*devstore.Redis
	clients []*redis.Client
}

func openRedlock(e *env.Env) (*redlockServers, error) {
	srv, err := e.Redlock()
	if err != nil {
		return nil, err
	}
	s := &redlockServers{srv: srv}
	for _, r := range srv {
		s.clients = append(s.clients, redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond}))
	}
	return s, nil
}

func (s *redlockServers) close() {
	for _, c := range s.clients {
		_ = c.Close()
	}
}

// lease reads the hot sku's lease value ("<token>:<owner>") on server i,
// under the env's replicas' key names; "" when it has none or does not
// answer.
func (s *redlockServers) lease(ctx context.Context, i int, sku string) string {
	return s.clients[i].Get(ctx, redlock.KeyName(redlock.KeyPrefix(env.DB), strategy.LockKey(sku))).Val()
}

// holding reports which of the servers at the indexes among hold lease
// value v (only servers that run: go-redis logs every failed dial).
func (s *redlockServers) holding(ctx context.Context, sku, v string, among []int) []int {
	var held []int
	for _, i := range among {
		if s.lease(ctx, i, sku) == v {
			held = append(held, i)
		}
	}
	return held
}

// each runs do on the servers at the indexes which at once.
func (s *redlockServers) each(which []int, do func(*devstore.Redis) error) error {
	errs := make([]error, len(which))
	var wg sync.WaitGroup
	for k, i := range which {
		wg.Go(func() {
			if err := do(s.srv[i]); err != nil {
				errs[k] = fmt.Errorf("redlock server %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ownerReplica is the replica id in a lease value "<token>:<owner>" (the
// service prefixes its owners with its REPLICA_ID).
func ownerReplica(v string) string {
	_, owner, _ := strings.Cut(v, ":")
	id, _, _ := strings.Cut(owner, "-")
	return id
}

// PartitionRedlock strikes the redlock strategy's five servers while a
// replica holds the hot sku's lease under load.
//
// With step > 0 it is Kleppmann's scenario. Servers 3 and 4 stop, so that
// the next grant, client A's, is on servers 0, 1 and 2 only; they start
// again, empty, while A still holds. Then servers 0 and 1 stop (A is cut
// off from them) and server 2's clock steps forward by step, past the TTL,
// which expires A's key there at once. The next replica to try, B, gets
// servers 2, 3 and 4, a majority, while A still works under its lease (the
// write stall keeps it there). Server 2 kept A's token in its fence, so
// B's token is higher, and a fenced store refuses A's late write.
//
// With step 0 only servers 0 and 1 stop, under whatever lease is held: a
// minority down, which a Redlock must survive without a double grant.
//
// It counts double holders for three TTLs (countDoubleHeld); the note
// gives the timeline. After the attack the stopped servers start again
// (empty) and the clock goes back.
func PartitionRedlock(step time.Duration) Injector {
	return func(ctx context.Context, f *Ctx) (*Event, error) {
		if len(f.SKUs) == 0 {
			return nil, errors.New("redlock partition: no sku to find the lease of")
		}
		sku := f.SKUs[0]
		s, err := openRedlock(f.Env)
		if err != nil {
			return nil, err
		}
		if step > 0 && !s.srv[2].HasClock() {
			s.close()
			return nil, fmt.Errorf("%w: the redlock servers were started without the clock shim (needs gcc)", env.ErrUnsupported)
		}
		stopped := []int{0, 1}
		ev := &Event{}
		ev.Cleanup = func(ctx context.Context) error {
			defer s.close()
			err := s.each(stopped, func(r *devstore.Redis) error { return r.Start(ctx) })
			if step > 0 {
				err = errors.Join(err, s.srv[2].SetClockOffset(0))
			}
			return err
		}
		var timeline []string
		t0 := time.Time{}
		mark := func(format string, a ...any) {
			if t0.IsZero() {
				t0 = time.Now()
			}
			timeline = append(timeline, fmt.Sprintf("+%dms ", time.Since(t0).Milliseconds())+fmt.Sprintf(format, a...))
		}

		a, how, err := f.victim(ctx)
		if err != nil {
			return ev, err
		}
		var held string // A's lease value
		if step > 0 {
			held, err = s.isolateGrant(ctx, f, sku, mark)
			if err != nil {
				return ev, err
			}
			how = "replica " + ownerReplica(held) + " held the lease on servers 0, 1, 2"
		} else {
			held = s.lease(ctx, 0, sku)
			how = fmt.Sprintf("replica %s %s; lease %q", f.Env.ID(a), how, held)
		}

		if err := s.each(stopped, func(r *devstore.Redis) error { return r.Stop() }); err != nil {
			return ev, err
		}
		ev.At = time.Now()
		mark("servers 0, 1 stopped")
		if step > 0 {
			if err := s.srv[2].SetClockOffset(step); err != nil {
				return ev, fmt.Errorf("step redlock server 2's clock by %v: %w", step, err)
			}
			mark("server 2's clock stepped %+v (A's key there: %q)", step, s.lease(ctx, 2, sku))
		}
		ev.Healed = time.Now()

		// Watch for the next grant on the servers still up while counting
		// double holders on the replicas.
		wctx, cancel := context.WithTimeout(ctx, 3*f.TTL)
		defer cancel()
		up := []int{2, 3, 4}
		var wg sync.WaitGroup
		wg.Go(func() {
			for wctx.Err() == nil {
				for _, i := range up {
					if v := s.lease(wctx, i, sku); v != "" && v != held {
						mark("next grant: %q on servers %v (A's %q still on %v)", v, s.holding(wctx, sku, v, up), held, s.holding(wctx, sku, held, up))
						return
					}
				}
				_ = Sleep(wctx, 2*time.Millisecond)
			}
		})
		ev.DoubleHeld, err = f.countDoubleHeld(ctx, 3*f.TTL)
		wg.Wait()
		what := "stopped redlock servers 0 and 1"
		if step > 0 {
			what = fmt.Sprintf("Kleppmann's partition: stopped redlock servers 0 and 1 and stepped server 2's clock %+v", step)
		}
		ev.Note = fmt.Sprintf("%s (%s); timeline: %s", what, how, strings.Join(timeline, "; "))
		return ev, err
	}
}

// isolateGrant makes the next grant of the hot sku's lease one on servers
// 0, 1 and 2 only: it stops servers 3 and 4, waits for a new lease value
// and starts them again, empty. It returns the value if still held with 3
// and 4 back, else tries again within the drill's search time.
func (s *redlockServers) isolateGrant(ctx context.Context, f *Ctx, sku string, mark func(string, ...any)) (string, error) {
	majority, minority, all := []int{0, 1, 2}, []int{3, 4}, []int{0, 1, 2, 3, 4}
	deadline := time.Now().Add(max(f.Search, 2*time.Second))
	for try := 1; time.Now().Before(deadline); try++ {
		before := s.lease(ctx, 0, sku)
		if err := s.each(minority, func(r *devstore.Redis) error { return r.Stop() }); err != nil {
			return "", err
		}
		var v string
		if granted, err := until(ctx, time.Until(deadline), time.Millisecond, func() (bool, error) {
			v = s.lease(ctx, 0, sku)
			return v != "" && v != before && len(s.holding(ctx, sku, v, majority)) == 3, nil
		}); err != nil || !granted {
			return "", cmp.Or(err, errors.New("redlock partition: no grant on servers 0, 1, 2 within the search time"))
		}
		mark("A (replica %s) granted %q on servers 0, 1, 2 (3 and 4 stopped; try %d)", ownerReplica(v), v, try)
		sctx := context.WithoutCancel(ctx)
		if err := s.each(minority, func(r *devstore.Redis) error { return r.Start(sctx) }); err != nil {
			return "", err
		}
		if held := s.holding(ctx, sku, v, all); len(held) == 3 && held[2] == 2 {
			mark("servers 3, 4 started again, empty; A's lease still on %v", held)
			return v, nil
		}
		mark("servers 3, 4 started again; A's lease gone meanwhile, again")
	}
	return "", errors.New("redlock partition: A let its lease go before servers 3 and 4 were back, every try")
}
