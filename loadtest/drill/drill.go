// Package drill is the catalogue of fault drills and their injectors: each
// fault says which strategies it applies to, with which replica flags, and
// how it strikes a running attack through an env.Env. Recovery and Tokens
// judge what the sales did across a fault.
package drill

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/loadtest/env"
	"github.com/stocklock/stocklock/loadtest/verdict"
	"github.com/stocklock/stocklock/pkg/stockclient"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// The faults, by name.
const (
	Crash         = "crash"          // kill -9 the replica holding the lock
	Pause         = "pause"          // SIGSTOP the holder for twice the TTL, then SIGCONT
	RedisRestart  = "redis-restart"  // restart the env's redis-server (no persistence)
	MongoRestart  = "mongo-restart"  // restart the embedded FerretDB on its data
	ClockSkew     = "clock-skew"     // replica b's lease clock 2 s off, the others' right
	LeaderKill    = "leader-kill"    // kill the leader of a three-member etcd cluster
	RedisClock    = "redis-clock"    // step the redis-server's wall clock forward past the TTL, or back
	RedisFailover = "redis-failover" // kill the Redis Cluster master of the hot lock, promote its replica
)

// Fault is one entry of the catalogue.
type Fault struct {
	Name   string         `json:"name"`
	Doc    string         `json:"doc"` // what it does, in one line
	Inject Injector       `json:"-"`   // strikes a running attack; nil when the configuration is the fault (clock skew)
	drills func() []Drill // over every strategy it applies to
}

// Catalogue is every fault, in the order "all" runs them: the one list the
// flags, the plan and the live page read.
var Catalogue = []Fault{
	{Crash, "kill -9 the replica holding the lock; it restarts after the attack", CrashHolder, crashDrills},
	{Pause, "SIGSTOP the lock holder for twice the lock TTL, then SIGCONT (fencing on, then off as a demonstration)", PauseHolder, pauseDrills},
	{RedisRestart, "restart the redis-server the harness started, without persistence (redis-stock also acknowledging after Redis alone, as a demonstration, and so again with the server killed and started on its append-only file)", RestartRedis, redisRestartDrills},
	{MongoRestart, "restart the embedded FerretDB on its data", RestartMongo, safeDrills("mongo restart", RestartMongo)},
	{ClockSkew, "replica b's lease clock 2s off (the configuration is the fault)", nil, clockDrills},
	{LeaderKill, "kill the leader of a three-member embedded etcd cluster", KillEtcdLeader, only("etcd leader kill", strategy.EtcdLock, KillEtcdLeader)},
	{RedisClock, "step the redis-server's clock 10s forward while a replica holds the redis-lock (fencing on, then off), and 30s back", JumpRedisClock(clockJump), clockJumpDrills},
	{RedisFailover, "on a Redis Cluster, kill -9 the master of the hot sku's lock key (redis-stock: its stock) while a replica holds the lock, and promote its replica at once: in sync, and resyncing (fencing on, then off; redis-stock acknowledging after Redis, without and with WAIT 1); not in all", FailoverRedisMaster, failoverDrills},
	{LockPartition, "cut the lock holder off from its lock store (Redis, etcd, MongoDB) for twice the lock TTL, then heal (Toxiproxy)", PartitionLockStore, lockPartitionDrills},
	{StorePartition, "cut a replica off from MongoDB for 3s under load, then heal: writes in flight lose their answers (Toxiproxy)", PartitionStore, safeDrills("mongo partition", PartitionStore)},
	{RedisPartition, "cut a replica off from Redis for 3s under load, then heal: the strategies that keep their stock in Redis (Toxiproxy)", PartitionRedis, only("redis partition", strategy.RedisStock, PartitionRedis)},
	{Latency, "add 350ms ± 150ms to every reply on a replica's store links for 4s (Toxiproxy)", SlowLinks, safeDrills("store latency", SlowLinks)},
	{Resets, "close each of a replica's store connections once 1 KiB of replies has passed on it, for 4s (Toxiproxy)", ResetLinks, safeDrills("connection resets", ResetLinks)},
	{NATSRestart, "kill -9 the embedded nats-server while queued sells and start it again at once: the stream in files, then in memory", RestartNATS, natsRestartDrills},
	{NATSAckLoss, "a replica's link to NATS one-way for 5s: its publishes land, their acknowledgements are lost and the publishes sent again (de-duplication on, then off as a demonstration) (Toxiproxy)", LoseAcks, ackLossDrills},
	{NATSCut, "cut a replica off from NATS for 3s under load, then heal (Toxiproxy)", PartitionNATS, only("nats partition", strategy.Queued, PartitionNATS)},
	{QueuedLag, "every queued consumer holds each batch 6s before applying it: a slow consumer (the configuration is the fault)", nil, lagDrills},
	{NATSLeaderKill, "on a three-server JetStream cluster, kill -9 the server leading queued's stream: at R3, and at R1 (no copy to fail over to); not in all", KillNATSLeader(3), leaderKillDrills},
	{RedlockPartition, "Kleppmann's scenario on redlock's five redis-servers: a grant on servers 0-2, then 0 and 1 stopped and server 2's clock 10s forward, so another replica gets 2-4 (fencing on, then off); and 0, 1 stopped alone", PartitionRedlock(clockJump), redlockDrills},
}

// Clock steps of the redis-clock drills: forward, well past the lock TTL
// of a drill, and back, further than any TTL.
const (
	clockJump = 10 * time.Second
	clockBack = -30 * time.Second
)

// clockJumpDrills: the redis-lock under a forward step of the server's
// clock, with fencing on and off, and under a backward step. The holders
// stall 800ms after their lease check, most of their time under the lock,
// so that the step lands while one is inside its critical section and the
// next waiter's attempt (at most 100ms later) lands before that one writes.
func clockJumpDrills() []Drill {
	stall := []string{"--write-stall=800ms"}
	off := append(slices.Clone(stall), "--fencing=false")
	return []Drill{
		{Label: "redis clock +10s", Strategy: strategy.RedisLock, Flags: Flags{All: stall}, Inject: JumpRedisClock(clockJump)},
		{Label: "redis clock +10s, fencing off", Strategy: strategy.RedisLock, Demo: true, Flags: Flags{All: off}, Inject: JumpRedisClock(clockJump)},
		{Label: "redis clock -30s", Strategy: strategy.RedisLock, Flags: Flags{All: stall}, Inject: JumpRedisClock(clockBack)},
	}
}

// NeedsRedisClock reports whether faults need a redis-server with a movable clock.
func NeedsRedisClock(faults []string) bool { return slices.Contains(faults, RedisClock) }

// Names lists the faults in catalogue order.
func Names() []string {
	out := make([]string, len(Catalogue))
	for i, f := range Catalogue {
		out[i] = f.Name
	}
	return out
}

// Lookup returns the fault called name.
func Lookup(name string) (Fault, bool) {
	i := slices.IndexFunc(Catalogue, func(f Fault) bool { return f.Name == name })
	if i < 0 {
		return Fault{}, false
	}
	return Catalogue[i], true
}

// aliases name groups of faults.
var aliases = map[string][]string{
	// all runs on one redis-server and one nats-server, with the replicas
	// reaching the stores directly: redis-failover and nats-leader-kill,
	// which need the replicas on a cluster, and the network faults, which
	// put proxies between them, must be named (network names them).
	"all": slices.DeleteFunc(Names(), func(n string) bool {
		return n == RedisFailover || n == NATSLeaderKill || slices.Contains(networkFaults, n)
	}),
	"store-restart": {RedisRestart, MongoRestart},
	"network":       networkFaults,
}

// Parse reads a comma-separated list of faults and aliases ("" or none: no
// fault) into fault names, in catalogue order, each once.
func Parse(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" || strings.TrimSpace(s) == "none" {
		return nil, nil
	}
	names := Names()
	var out []string
	for name := range strings.SplitSeq(s, ",") {
		name = strings.TrimSpace(name)
		if alias, ok := aliases[name]; ok {
			out = append(out, alias...)
		} else if slices.Contains(names, name) {
			out = append(out, name)
		} else if name != "" {
			return nil, fmt.Errorf("unknown fault %q (known: %s, store-restart, network, all)", name, strings.Join(names, ", "))
		}
	}
	slices.SortFunc(out, func(a, b string) int { return slices.Index(names, a) - slices.Index(names, b) })
	return slices.Compact(out), nil
}

// NeedsEtcdCluster reports whether faults need a three-member etcd.
func NeedsEtcdCluster(faults []string) bool { return slices.Contains(faults, LeaderKill) }

// LockStrategies are the strategies that hold a lease (and so can be caught
// holding it); the others have no critical section to land in.
var LockStrategies = strategy.NamesOf(strategy.Info.Locks)

// FencedStrategies are the lock strategies whose tokens order grants across
// replicas, so that their writes are fenced.
var FencedStrategies = strategy.NamesOf(func(in strategy.Info) bool { return in.Locks() && in.Fenced })

// safeStrategies are the strategies that must keep the books straight
// under every fault.
var safeStrategies = strategy.NamesOf(func(in strategy.Info) bool { return in.Safe })

// Drill is one strategy run under one fault.
type Drill struct {
	Fault    string // the catalogue's name of its fault
	Label    string // the fault as the tables show it
	Strategy string
	// Demo marks a deliberately weakened configuration (fencing off): its
	// anomalies are the point, so it is judged like an unsafe strategy.
	Demo   bool
	Flags  Flags
	Inject Injector // nil when the configuration is the fault (clock skew)
}

// Flags are a drill's replica flags beyond the fault baseline: every
// replica gets All, and replica b (OddReplica) Odd after them, whatever
// the number of replicas.
type Flags struct{ All, Odd []string }

// OddReplica is the index of replica b, the one a drill's odd flags go to.
// Fault drills run with at least two replicas (the harness validates it).
const OddReplica = 1

// PerReplica returns the extra flags of each of n replicas, by index.
func (f Flags) PerReplica(n int) [][]string {
	out := make([][]string, n)
	for i := range out {
		out[i] = slices.Clone(f.All)
		if i == OddReplica {
			out[i] = append(out[i], f.Odd...)
		}
	}
	return out
}

// String says which replicas run with which drill flags.
func (f Flags) String() string {
	var parts []string
	if len(f.All) > 0 {
		parts = append(parts, "every replica "+strings.Join(f.All, " "))
	}
	if len(f.Odd) > 0 {
		parts = append(parts, "replica "+env.ReplicaID(OddReplica)+" "+strings.Join(f.Odd, " "))
	}
	return cmp.Or(strings.Join(parts, "; "), "none")
}

// Injector injects a fault into a running attack and returns what it did.
// An error wrapping env.ErrUnsupported means it cannot strike here.
type Injector func(ctx context.Context, f *Ctx) (*Event, error)

// Event is what an injector did.
type Event struct {
	At     time.Time // when the fault struck
	Healed time.Time // when it was over (the store answered again, the process resumed); zero: At
	Victim string    // the replica the fault hit, "" for a store fault
	Shape  string    // the fault's size beyond victim and span, for a label: "350±150 ms"; "" if none
	Note   string
	// DoubleHeld counts the polls after the fault at which two replicas
	// held the lock at once (drills that look for double grants).
	DoubleHeld int
	// Cleanup, if not nil, undoes the fault after the attack (restarts a
	// killed replica or etcd member) so that the next run starts whole.
	Cleanup func(ctx context.Context) error
}

// Ctx is what an injector works with.
type Ctx struct {
	Env      *env.Env
	Probe    *stockclient.Client // asks the replicas who holds a lock
	Strategy string              // the strategy under attack
	SKUs     []string            // the skus under attack (a drill's one hot sku)
	Strike   time.Time           // when the fault strikes: an injector waits for it,
	Search   time.Duration       // then looks for a victim for up to this
	Repeat   int                 // picks the victim by turn when no holder is seen
	TTL      time.Duration       // the replicas' lock TTL: a pause lasts twice this
	AOF      string              // CrashRedisOnAOF's appendfsync (one of AOFPolicies; "": the first)
}

// Plan lists the drills of faults, for the strategies given, fault by fault.
func Plan(faults, strategies []string) []Drill {
	var ds []Drill
	for _, name := range faults {
		f, ok := Lookup(name)
		if !ok {
			continue
		}
		for _, d := range f.drills() {
			if slices.Contains(strategies, d.Strategy) {
				d.Fault = f.Name
				ds = append(ds, d)
			}
		}
	}
	return ds
}

// over is drill d for each of strategies.
func over(strategies []string, d Drill) []Drill {
	ds := make([]Drill, len(strategies))
	for i, s := range strategies {
		ds[i], ds[i].Strategy = d, s
	}
	return ds
}

// safeDrills returns a fault's drills over every safe strategy.
func safeDrills(label string, inject Injector) func() []Drill {
	return func() []Drill { return over(safeStrategies, Drill{Label: label, Inject: inject}) }
}

// crashDrills: every strategy, the unsafe ones as demonstrations (a crash
// does not make them any worse, they oversell anyway).
func crashDrills() []Drill { return over(strategy.Names(), Drill{Label: "crash", Inject: CrashHolder}) }

// pauseDrills: every safe strategy, and every fenced one again with
// fencing off, to show what the fence stops.
func pauseDrills() []Drill {
	off := Drill{Label: "pause, fencing off", Demo: true, Flags: Flags{All: []string{"--fencing=false"}}, Inject: PauseHolder}
	return append(over(safeStrategies, Drill{Label: "pause", Inject: PauseHolder}), over(FencedStrategies, off)...)
}

// redisRestartDrills: redis-lock, and redis-stock (its stock lives in
// Redis while it sells) with its safe rule (acknowledge after MongoDB);
// acknowledging after Redis alone, to show what a restart without
// persistence then costs (docs/redis-stock.md); and so again with an
// append-only file the server restarts on after a kill -9. That is still a
// demonstration: it closes the restart's gap (units sold twice), not the
// write-behind's (MongoDB, which reads answer from, lags behind the
// acknowledged sales; a replica killed loses its unwritten ones).
func redisRestartDrills() []Drill {
	return []Drill{
		{Label: "redis restart", Strategy: strategy.RedisLock, Inject: RestartRedis},
		{Label: "redis restart", Strategy: strategy.RedisStock, Inject: RestartRedis},
		{Label: "redis restart, ack after redis", Strategy: strategy.RedisStock, Demo: true,
			Flags: Flags{All: []string{AckAfterRedis}}, Inject: RestartRedis},
		{Label: "redis kill -9 on its AOF, ack after redis", Strategy: strategy.RedisStock, Demo: true,
			Flags: Flags{All: []string{AckAfterRedis}}, Inject: CrashRedisOnAOF},
	}
}

// AckAfterRedis is the replica flag of redis-stock's demo rule: a sale is
// acknowledged once the Lua take ran, and written to MongoDB behind.
const AckAfterRedis = "--redis-stock-ack=redis"

// AOFPolicies are CrashRedisOnAOF's appendfsync policies (Ctx.AOF), the first the default.
var AOFPolicies = []string{"always", "everysec", "no"}

// clockDrills: replica b's lease clock off, against each lock.
func clockDrills() []Drill {
	ahead, behind := []string{"--clock-offset=2s"}, []string{"--clock-offset=-2s"}
	wide := []string{"--lock-skew=3s"}
	return []Drill{
		{Label: "clock b +2s, allowance 500ms", Strategy: strategy.MongoLease, Flags: Flags{Odd: ahead}},
		{Label: "clock b -2s, allowance 500ms", Strategy: strategy.MongoLease, Flags: Flags{Odd: behind}},
		{Label: "clock b +2s, allowance 3s", Strategy: strategy.MongoLease, Flags: Flags{All: wide, Odd: ahead}},
		{Label: "clock b +2s", Strategy: strategy.RedisLock, Flags: Flags{Odd: ahead}},
		{Label: "clock b +2s", Strategy: strategy.EtcdLock, Flags: Flags{Odd: ahead}},
		{Label: "clock b +2s", Strategy: strategy.Redlock, Flags: Flags{Odd: ahead}},
	}
}

// only is a fault with one drill.
func only(label, strategy string, inject Injector) func() []Drill {
	return func() []Drill { return []Drill{{Label: label, Strategy: strategy, Inject: inject}} }
}

// Baseline are the flags every replica of a fault run gets: a short TTL
// so that a dead holder's lease runs out within the attack, a lock wait
// that outlasts it (a survivor waits it out instead of giving up), and the
// write stall that lets a pause land after the lease check.
func Baseline(ttl, writeStall time.Duration) []string {
	return []string{
		"--lock-ttl=" + ttl.String(),
		"--lock-wait=" + (3 * ttl).String(),
		"--request-timeout=" + (3*ttl + 10*time.Second).String(),
		"--write-stall=" + writeStall.String(),
	}
}

// Sale is one acknowledged sale, for the recovery and token checks.
type Sale struct {
	Start, End time.Time
	Fence      int64
}

// Trigger is how long into an attack of duration d (0: 8 s) a drill's
// fault strikes: late enough that the lock is busy and sales are flowing,
// early enough that the recovery is inside the attack.
func Trigger(d time.Duration) time.Duration {
	return max(cmp.Or(d, 8*time.Second)/4, 500*time.Millisecond)
}

// until calls try every interval until it reports done or fails, for up
// to d (then false), or until ctx ends (its cause); it tries at least once.
func until(ctx context.Context, d, every time.Duration, try func() (bool, error)) (bool, error) {
	for end := time.Now().Add(d); ; {
		if done, err := try(); done || err != nil || !time.Now().Before(end) {
			return done, err
		}
		if err := Sleep(ctx, every); err != nil {
			return false, err
		}
	}
}

// Sleep waits d or until ctx ends, whichever is first.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// victim waits for the strike time and picks the replica to hit: the one
// holding a lease of the strategy now (its /healthz locks_held), or, for a
// strategy without a lease or when no holder shows up within Search, one
// by turn (Repeat). It returns its index and how it was chosen.
func (f *Ctx) victim(ctx context.Context) (int, string, error) {
	if err := Sleep(ctx, time.Until(f.Strike)); err != nil {
		return 0, "", err
	}
	n := f.Env.Len()
	if !slices.Contains(LockStrategies, f.Strategy) {
		return f.Repeat % n, "no lease to hold: picked by turn", nil
	}
	i := -1
	if found, err := until(ctx, max(f.Search, time.Second), 2*time.Millisecond, func() (_ bool, err error) {
		i, err = f.findHolder(ctx)
		return i >= 0, err
	}); found || err != nil {
		return i, "holding the " + f.Strategy + " lease at the last poll", err
	}
	return f.Repeat % n, "no holder seen: picked by turn", nil
}

// findHolder is the replica that holds a lease of the strategy; -1: none.
func (f *Ctx) findHolder(ctx context.Context) (int, error) {
	held, err := f.held(ctx)
	return slices.IndexFunc(held, func(n int) bool { return n > 0 }), err
}

// held asks every replica's /healthz at once how many leases of the strategy it holds.
func (f *Ctx) held(ctx context.Context) ([]int, error) {
	bases := f.Env.Bases()
	held := make([]int, len(bases))
	var wg sync.WaitGroup
	for i, base := range bases {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if body, err := f.Probe.At(base).Health(cctx); err == nil {
				held[i] = body.LocksHeld[f.Strategy]
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	return held, nil
}

// strike makes an Injector of hit: once check (if not nil) lets the fault
// strike here, it waits for the strike time and picks the victim (see
// victim), then hits replica i, how saying how it was picked.
func strike(check func(*Ctx) error, hit func(ctx context.Context, f *Ctx, i int, how string) (*Event, error)) Injector {
	return func(ctx context.Context, f *Ctx) (*Event, error) {
		if check != nil {
			if err := check(f); err != nil {
				return nil, err
			}
		}
		i, how, err := f.victim(ctx)
		if err != nil {
			return nil, err
		}
		return hit(ctx, f, i, how)
	}
}

// downFrom is the event of a store down from at until now, noted with what, the downtime and how.
func downFrom(at time.Time, what, how string) *Event {
	healed := time.Now()
	return &Event{At: at, Healed: healed, Note: fmt.Sprintf("%s (down %s; %s)", what, healed.Sub(at).Round(time.Millisecond), how)}
}

// unless is nil when ok, else env.ErrUnsupported saying why.
func unless(ok bool, why string, a ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf("%w: %s", env.ErrUnsupported, fmt.Sprintf(why, a...))
}

// ownRedis is nil when the env's Redis is a redis-server the harness
// started, which it can do what to.
func ownRedis(f *Ctx, what string) error {
	return unless(f.Env.Redis != nil && f.Env.Redis.Kind == devstore.KindRedisServer,
		"the harness can %s only a redis-server it started (this Redis is %s)", what, f.Env.RedisText)
}

// CrashHolder kills the lock holder with SIGKILL: no release, no shutdown
// hook, its lease stays until its TTL runs out; it restarts after the attack.
var CrashHolder = strike(nil, func(ctx context.Context, f *Ctx, i int, how string) (*Event, error) {
	id, pid, at := f.Env.ID(i), f.Env.Procs()[i].Pid, time.Now()
	if err := f.Env.Kill(i); err != nil {
		return nil, fmt.Errorf("kill -9 replica %s (pid %d): %w", id, pid, err)
	}
	return &Event{
		At: at, Victim: id,
		Note:    fmt.Sprintf("kill -9 replica %s (pid %d, %s)", id, pid, how),
		Cleanup: func(ctx context.Context) error { return f.Env.Restart(ctx, i) },
	}, nil
})

// PauseHolder stops the lock holder with SIGSTOP for twice the TTL and
// continues it: its lease expires meanwhile, another replica takes the lock
// and sells, and the paused one wakes up inside its critical section,
// believing it still holds the lock.
var PauseHolder = strike(nil, func(ctx context.Context, f *Ctx, i int, how string) (*Event, error) {
	id, at := f.Env.ID(i), time.Now()
	if err := f.Env.Pause(i); err != nil {
		return nil, fmt.Errorf("SIGSTOP replica %s: %w", id, err)
	}
	// Whatever happens, the replica must not stay stopped: ctx does not cut this short.
	time.Sleep(2 * f.TTL)
	if err := f.Env.Resume(i); err != nil {
		return nil, fmt.Errorf("SIGCONT replica %s: %w", id, err)
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return &Event{At: at, Healed: time.Now(), Victim: id,
		Note: fmt.Sprintf("SIGSTOP replica %s for %s (%s)", id, 2*f.TTL, how)}, nil
})

// RestartRedis restarts the redis-server the harness started, while a
// replica holds a redis-lock lease. It keeps nothing on disk, so every
// lease is gone afterwards, and its key counter too.
var RestartRedis = strike(func(f *Ctx) error { return ownRedis(f, "restart") }, func(ctx context.Context, f *Ctx, _ int, how string) (*Event, error) {
	// The fault strikes when the server is gone, not when the harness
	// decides to stop it: a sale sent in between is no recovery.
	if err := f.Env.Redis.Stop(); err != nil {
		return nil, fmt.Errorf("stop redis-server: %w", err)
	}
	at := time.Now()
	if err := f.Env.Redis.Start(ctx); err != nil {
		return nil, fmt.Errorf("start redis-server again: %w", err)
	}
	return downFrom(at, "restarted redis-server, no persistence", "a replica was "+how), nil
})

// CrashRedisOnAOF turns the append-only file of the redis-server the
// harness started on at once (appendfsync Ctx.AOF), kills the server with
// SIGKILL at the strike and starts it again on its file, which keeps every
// write; the file is off again after the attack. A kill -9 loses no write
// the server had handed to the kernel, whatever the policy (the page cache
// outlives the process): appendfsync always (an fsync before each answer)
// matters when the machine goes down, which a drill does not do.
func CrashRedisOnAOF(ctx context.Context, f *Ctx) (_ *Event, err error) {
	if err := ownRedis(f, "crash and restart"); err != nil {
		return nil, err
	}
	r, fsync := f.Env.Redis, cmp.Or(f.AOF, AOFPolicies[0])
	if err := r.SetAOF(ctx, fsync); err != nil {
		return nil, fmt.Errorf("turn the append-only file on: %w", err)
	}
	off := func(ctx context.Context) error { return r.SetAOF(ctx, "") }
	defer func() {
		if err != nil {
			err = errors.Join(err, off(context.WithoutCancel(ctx)))
		}
	}()
	_, how, err := f.victim(ctx)
	if err != nil {
		return nil, err
	}
	if err := r.Crash(); err != nil {
		return nil, fmt.Errorf("kill -9 redis-server: %w", err)
	}
	at := time.Now()
	if err := r.Start(ctx); err != nil {
		return nil, fmt.Errorf("start redis-server again on its append-only file: %w", err)
	}
	ev := downFrom(at, "killed redis-server (SIGKILL) and started it on its append-only file, appendfsync "+fsync, "a replica was "+how)
	ev.Shape, ev.Cleanup = "appendfsync "+fsync, off
	return ev, nil
}

// RestartMongo restarts the embedded FerretDB on its data directory.
var RestartMongo = strike(func(f *Ctx) error {
	return unless(f.Env.Mongo.Kind == devstore.KindFerretDB,
		"the harness can restart only the embedded FerretDB (this MongoDB is %s)", f.Env.Mongo.Kind)
}, func(ctx context.Context, f *Ctx, _ int, how string) (*Event, error) {
	at := time.Now()
	if err := f.Env.Mongo.Restart(ctx); err != nil {
		return nil, fmt.Errorf("restart FerretDB: %w", err)
	}
	return downFrom(at, "restarted FerretDB on its data", how), nil
})

// KillEtcdLeader crashes the leader of the three-member etcd cluster; the
// other two elect a new one. The member is started again after the attack.
var KillEtcdLeader = strike(func(f *Ctx) error {
	return unless(f.Env.Etcd.Kind == devstore.KindEmbeddedEtcd && len(f.Env.Etcd.Endpoints) >= 3,
		"needs the harness's three-member embedded etcd (this etcd is %s with %d members)", f.Env.Etcd.Kind, len(f.Env.Etcd.Endpoints))
}, func(ctx context.Context, f *Ctx, _ int, how string) (*Event, error) {
	// An election may be under way (on a busy machine): wait for a leader
	// rather than give up.
	leader := -1
	switch found, err := until(ctx, 5*time.Second, 20*time.Millisecond, func() (_ bool, err error) {
		leader, err = f.Env.Etcd.Leader()
		return leader >= 0, err
	}); {
	case err != nil:
		return nil, fmt.Errorf("find the etcd leader: %w", err)
	case !found:
		return nil, errors.New("find the etcd leader: no member has known one for 5s")
	}
	at := time.Now()
	if err := f.Env.Etcd.Kill(leader); err != nil {
		return nil, fmt.Errorf("kill etcd member %d: %w", leader, err)
	}
	return &Event{At: at,
		Note:    fmt.Sprintf("killed etcd member %d, the leader (%s)", leader, how),
		Cleanup: func(ctx context.Context) error { return f.Env.Etcd.Start(ctx, leader) },
	}, nil
})

// Recovery is how long sales stopped because of the fault: the longest
// time without a completed sale from the strike to the end of the attack
// (false: no sale completed after it). Measured on completions, not on
// sends: the workers are busy with requests queued for the lock, so when a
// request goes out says more about the queue than about the fault; and a
// sale committing at the strike ends the first gap early, not the longest.
func Recovery(sales []Sale, ev *Event) (time.Duration, bool) {
	var ends []time.Time
	for _, s := range sales {
		if s.End.After(ev.At) {
			ends = append(ends, s.End)
		}
	}
	slices.SortFunc(ends, time.Time.Compare)
	var longest time.Duration
	prev := ev.At
	for _, e := range ends {
		longest, prev = max(longest, e.Sub(prev)), e
	}
	return longest, len(ends) > 0
}

// Tokens checks that fencing tokens kept increasing across the fault:
// every sale that started after the fault was over carries a higher token
// than every sale completed before it struck, and no token was used twice
// (all it checks with no event: a configuration fault, clock skew).
func Tokens(sales []Sale, ev *Event) *verdict.TokenCheck {
	tc := &verdict.TokenCheck{}
	var healed time.Time // sales sent after this count as "after the fault"
	if ev != nil {
		healed = slices.MaxFunc([]time.Time{ev.At, ev.Healed}, time.Time.Compare)
	}
	seen := map[int64]bool{}
	for _, s := range sales {
		if s.Fence == 0 {
			continue
		}
		if seen[s.Fence] {
			tc.Reused++
		}
		seen[s.Fence] = true
		switch {
		case ev == nil:
		case s.End.Before(ev.At):
			tc.Before++
			tc.MaxBefore = max(tc.MaxBefore, s.Fence)
		case s.Start.After(healed):
			if tc.After == 0 || s.Fence < tc.MinAfter {
				tc.MinAfter = s.Fence
			}
			tc.After++
		}
	}
	tc.OK = tc.Reused == 0 && (tc.Before == 0 || tc.After == 0 || tc.MinAfter > tc.MaxBefore)
	return tc
}

// JumpRedisClock steps the env's redis-server's clock by d while a replica
// holds the redis-lock, then counts double holders for three TTLs (see
// countDoubleHeld). A step forward past the TTL expires the holder's key at
// once: another replica is granted the lock while the first still works
// under it. The clock goes back to true time after the attack.
func JumpRedisClock(d time.Duration) Injector {
	return strike(func(f *Ctx) error {
		return unless(f.Env.Redis != nil && f.Env.Redis.HasClock(), "the redis-server was started without the clock shim (needs gcc)")
	}, func(ctx context.Context, f *Ctx, _ int, how string) (ev *Event, err error) {
		r, at := f.Env.Redis, time.Now()
		if err := r.SetClockOffset(d); err != nil {
			return nil, fmt.Errorf("step the redis-server clock by %s: %w", d, err)
		}
		ev = &Event{At: at, Healed: time.Now(),
			Note:    fmt.Sprintf("stepped the redis-server clock by %+v (%s)", d, how),
			Cleanup: func(context.Context) error { return r.SetClockOffset(0) },
		}
		ev.DoubleHeld, err = f.countDoubleHeld(ctx, 3*f.TTL)
		return ev, err
	})
}

// countDoubleHeld polls the replicas' /healthz for window and counts the
// polls that saw two leases of the strategy or more (see doubles).
func (f *Ctx) countDoubleHeld(ctx context.Context, window time.Duration) (int, error) {
	var d doubles
	_, err := until(ctx, window, 2*time.Millisecond, func() (bool, error) {
		held, err := f.held(ctx)
		n := 0 // two leases in one replica count too (two of its requests granted the hot sku's lock at once)
		for _, h := range held {
			n += h
		}
		d.poll(n)
		return false, err
	})
	return d.n, err
}

// doubles counts the polls that saw two holders or more. A handoff can
// show two at one poll (the next holder's grant is counted before the last
// one's release has returned), while a double grant lasts: only runs of
// two polls or more count, whole.
type doubles struct{ n, streak int }

func (d *doubles) poll(held int) {
	switch {
	case held < 2:
		d.streak = 0
	case d.streak == 0:
		d.streak = 1
	case d.streak == 1:
		d.streak = 2
		d.n += 2
	default:
		d.n++
	}
}
