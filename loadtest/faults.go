package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/pkg/inventory"
)

// Fault drills: the same attack as the comparison, with a fault injected
// into the replicas or the stores while it runs. Each drill is one
// strategy under one fault; the verdict is the same arithmetic (oversold,
// lost updates, ledger), plus the time until sales resume and a check that
// fencing tokens kept increasing across the fault.

// The faults --faults accepts.
const (
	faultCrash        = "crash"         // kill -9 the replica holding the lock
	faultPause        = "pause"         // SIGSTOP the holder for twice the TTL, then SIGCONT
	faultRedisRestart = "redis-restart" // restart the harness's redis-server (no persistence)
	faultMongoRestart = "mongo-restart" // restart the embedded FerretDB on its data
	faultClockSkew    = "clock-skew"    // replica b's lease clock 2 s off, the others' right
	faultLeaderKill   = "leader-kill"   // kill the leader of a three-member etcd cluster
)

// faultNames lists the faults in the order --faults all runs them.
var faultNames = []string{faultCrash, faultPause, faultRedisRestart, faultMongoRestart, faultClockSkew, faultLeaderKill}

// faultAliases name groups of faults.
var faultAliases = map[string][]string{
	"all":           faultNames,
	"store-restart": {faultRedisRestart, faultMongoRestart},
}

func parseFaults(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" || strings.TrimSpace(s) == "none" {
		return nil, nil
	}
	var out []string
	for name := range strings.SplitSeq(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		names, ok := faultAliases[name]
		if !ok {
			if !slices.Contains(faultNames, name) {
				return nil, fmt.Errorf("--faults: unknown fault %q (known: %s, store-restart, all)", name, strings.Join(faultNames, ", "))
			}
			names = []string{name}
		}
		for _, n := range names {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	// Run them in the documented order, whatever order they were given in.
	slices.SortFunc(out, func(a, b string) int { return slices.Index(faultNames, a) - slices.Index(faultNames, b) })
	return out, nil
}

// needsEtcdCluster reports whether the drills need a three-member etcd.
func (c Config) needsEtcdCluster() bool { return slices.Contains(c.Faults, faultLeaderKill) }

// lockStrategies are the strategies that hold a lease (and so can be
// caught holding it); the others have no critical section to land in.
var lockStrategies = registryNames(func(in inventory.Info) bool { return in.Lock != inventory.LockNone })

// fencedStrategies are the lock strategies whose tokens order grants across
// replicas, so that their writes are fenced.
var fencedStrategies = registryNames(func(in inventory.Info) bool { return in.Lock != inventory.LockNone && in.Fenced })

// safeStrategies are the strategies that must keep the books straight
// under every fault.
var safeStrategies = registryNames(func(in inventory.Info) bool { return in.Safe })

// registryNames returns the names of the registry's strategies that keep
// says to keep, in registry order.
func registryNames(keep func(inventory.Info) bool) []string {
	var names []string
	for _, in := range inventory.Registry() {
		if keep(in) {
			names = append(names, in.Name)
		}
	}
	return names
}

// drill is one strategy run under one fault.
type drill struct {
	label    string // the fault as the tables show it
	strategy string
	// demo marks a deliberately weakened configuration (fencing off): its
	// anomalies are the point, so it is judged like an unsafe strategy.
	demo bool
	// flags are the replicas' flags beyond the fault baseline.
	flags drillFlags
	// inject injects the fault while the attack runs; nil when the
	// configuration is the fault (clock skew).
	inject injector
}

// drillFlags are a drill's replica flags beyond the fault baseline: every
// replica gets all, and replica b (index oddReplica) gets odd after them,
// so that a drill that sets one replica against the others does so with
// any number of replicas.
type drillFlags struct{ all, odd []string }

// oddReplica is the index of replica b, the one a drill's odd flags go to.
// Fault drills run with at least two replicas (Config.validate).
const oddReplica = 1

// perReplica returns the extra flags of each of n replicas, by index.
func (f drillFlags) perReplica(n int) [][]string {
	out := make([][]string, n)
	for i := range out {
		out[i] = slices.Clone(f.all)
		if i == oddReplica {
			out[i] = append(out[i], f.odd...)
		}
	}
	return out
}

// String says which replicas run with which drill flags.
func (f drillFlags) String() string {
	var parts []string
	if len(f.all) > 0 {
		parts = append(parts, "every replica "+strings.Join(f.all, " "))
	}
	if len(f.odd) > 0 {
		parts = append(parts, "replica "+replicaID(oddReplica)+" "+strings.Join(f.odd, " "))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

// injector injects a fault into a running attack and returns what it did.
type injector func(ctx context.Context, f *faultCtx) (*faultEvent, error)

// faultEvent is what an injector did.
type faultEvent struct {
	At     time.Time // when the fault struck
	Healed time.Time // when it was over (the store answered again, the process resumed); zero: At
	Victim string    // the replica the fault hit, "" for a store fault
	Note   string
	// cleanup undoes the fault after the attack (restarts a killed
	// replica or etcd member) so that the next drill starts whole.
	cleanup func(ctx context.Context) error
}

// errSkipped means the drill cannot run against these stores (a Redis
// the harness cannot restart, say).
var errSkipped = errors.New("skipped")

// faultCtx is what an injector works with.
type faultCtx struct {
	h        *harness
	env      *localEnv
	strategy string
	started  time.Time // the attack's start
	repeat   int
}

// plan lists the drills of cfg, for the strategies it names.
func plan(cfg Config) []drill {
	var ds []drill
	add := func(d drill) {
		if slices.Contains(cfg.Strategies, d.strategy) {
			ds = append(ds, d)
		}
	}
	for _, f := range cfg.Faults {
		switch f {
		case faultCrash:
			// Every strategy: the unsafe ones as demonstrations (a crash
			// does not make them any worse, they oversell anyway).
			for _, s := range inventory.Names() {
				add(drill{label: "crash", strategy: s, inject: crashHolder})
			}
		case faultPause:
			for _, s := range safeStrategies {
				add(drill{label: "pause", strategy: s, inject: pauseHolder})
			}
			off := []string{"--fencing=false"}
			for _, s := range fencedStrategies {
				add(drill{label: "pause, fencing off", strategy: s, demo: true, flags: drillFlags{all: off}, inject: pauseHolder})
			}
		case faultRedisRestart:
			add(drill{label: "redis restart", strategy: "redis-lock", inject: restartRedis})
		case faultMongoRestart:
			for _, s := range safeStrategies {
				add(drill{label: "mongo restart", strategy: s, inject: restartMongo})
			}
		case faultClockSkew:
			ahead, behind := []string{"--clock-offset=2s"}, []string{"--clock-offset=-2s"}
			wide := []string{"--lock-skew=3s"}
			add(drill{label: "clock b +2s, allowance 500ms", strategy: "mongo-lease", flags: drillFlags{odd: ahead}})
			add(drill{label: "clock b -2s, allowance 500ms", strategy: "mongo-lease", flags: drillFlags{odd: behind}})
			add(drill{label: "clock b +2s, allowance 3s", strategy: "mongo-lease", flags: drillFlags{all: wide, odd: ahead}})
			add(drill{label: "clock b +2s", strategy: "redis-lock", flags: drillFlags{odd: ahead}})
			add(drill{label: "clock b +2s", strategy: "etcd-lock", flags: drillFlags{odd: ahead}})
		case faultLeaderKill:
			add(drill{label: "etcd leader kill", strategy: "etcd-lock", inject: killEtcdLeader})
		}
	}
	return ds
}

// faultBaseline are the flags every replica of a fault run gets: a short
// TTL so that a dead holder's lease runs out within the attack, a lock wait
// that outlasts it (a survivor waits the dead lease out instead of giving
// up), and the write stall that lets a pause land after the lease check.
func faultBaseline(cfg Config) []string {
	return []string{
		"--lock-ttl=" + cfg.FaultTTL.String(),
		"--lock-wait=" + (3 * cfg.FaultTTL).String(),
		"--request-timeout=" + (3*cfg.FaultTTL + 10*time.Second).String(),
		"--write-stall=" + cfg.WriteStall.String(),
	}
}

// runFaults runs every drill of the plan, --repeat times.
func (h *harness) runFaults(ctx context.Context, env *localEnv) ([]report.Run, error) {
	drills := plan(h.cfg)
	if len(drills) == 0 {
		return nil, fmt.Errorf("--faults %s with --strategies %s: no drill applies", strings.Join(h.cfg.Faults, ","), strings.Join(h.cfg.Strategies, ","))
	}
	if err := h.warmup(ctx); err != nil {
		return nil, err
	}
	var runs []report.Run
	total := len(drills) * h.cfg.Repeat
	n := 0
	began := time.Now()
	for rep := 1; rep <= h.cfg.Repeat; rep++ {
		for _, d := range drills {
			n++
			if err := env.configure(ctx, d.flags.perReplica(len(env.procs))); err != nil {
				return runs, fmt.Errorf("%s, %s: reconfigure the replicas: %w", d.label, d.strategy, err)
			}
			eta := ""
			if n > 1 {
				per := time.Since(began) / time.Duration(n-1)
				eta = fmt.Sprintf(", about %s left", (per * time.Duration(total-n+1)).Round(time.Second))
			}
			h.logf("[%d/%d] repeat %d/%d, %s, %s: %s%s", n, total, rep, h.cfg.Repeat, d.label, d.strategy, h.loadText(), eta)
			run, err := h.runStrategy(ctx, d.strategy, &faultSpec{drill: d, env: env, repeat: rep})
			if err != nil {
				return runs, err
			}
			rec := "-"
			if run.RecoverySeconds != nil {
				rec = fmt.Sprintf("%.2fs", *run.RecoverySeconds)
			}
			h.logf("  → %s: %s; sold %d, oversold %d, lost updates %d, ledger mismatch %d, fenced %d, lease lost %d, sales resumed after %s (%s)",
				d.strategy, run.FaultNote, run.Sold, run.Oversold, run.LostUpdates, run.LedgerMismatch,
				run.Codes["503 fenced"], run.Codes["503 lease_lost"], rec, run.Verdict)
			runs = append(runs, run)
		}
	}
	return runs, nil
}

// faultSpec is the fault side of one runStrategy call.
type faultSpec struct {
	drill  drill
	env    *localEnv
	repeat int
}

// sale is one acknowledged sale, for the recovery and token checks.
type sale struct {
	start, end time.Time
	replica    string
	fence      int64
}

// trigger is how long into the attack a fault strikes: late enough that
// the lock is busy and sales are flowing, early enough that the recovery
// is inside the attack.
func (f *faultCtx) trigger() time.Duration {
	d := f.h.cfg.Duration
	if d == 0 {
		d = 8 * time.Second
	}
	return max(d/4, 500*time.Millisecond)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// victim picks the replica to hit: the one holding a lease of the strategy
// right now, found by polling the replicas' /healthz (locks_held), or, for
// a strategy without a lease, the replicas in turn by repeat. It returns
// the replica's index and a note on how it was chosen.
func (f *faultCtx) victim(ctx context.Context) (int, string, error) {
	if err := sleepCtx(ctx, time.Until(f.started.Add(f.trigger()))); err != nil {
		return 0, "", err
	}
	if !slices.Contains(lockStrategies, f.strategy) {
		i := f.repeat % len(f.h.replicas)
		return i, "no lease to hold: picked by turn", nil
	}
	// Look for a holder for up to half the attack.
	deadline := time.Now().Add(max(f.h.cfg.Duration/2, time.Second))
	for time.Now().Before(deadline) {
		i, err := f.h.findHolder(ctx, f.strategy)
		if err != nil {
			return 0, "", err
		}
		if i >= 0 {
			return i, "holding the " + f.strategy + " lease at the last poll", nil
		}
		if err := sleepCtx(ctx, 2*time.Millisecond); err != nil {
			return 0, "", err
		}
	}
	i := f.repeat % len(f.h.replicas)
	return i, "no holder seen: picked by turn", nil
}

// findHolder asks every replica's /healthz at once which holds a lease of
// strategy; -1 if none does.
func (h *harness) findHolder(ctx context.Context, strategy string) (int, error) {
	held := make([]int, len(h.replicas))
	var wg sync.WaitGroup
	for i, base := range h.replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var body struct {
				LocksHeld map[string]int `json:"locks_held"`
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if err := h.probe.do(cctx, "GET", base+"/healthz", nil, &body); err == nil {
				held[i] = body.LocksHeld[strategy]
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return -1, context.Cause(ctx)
	}
	for i, n := range held {
		if n > 0 {
			return i, nil
		}
	}
	return -1, nil
}

// crashHolder kills the lock holder with SIGKILL: no release, no shutdown
// hook, its lease stays until its TTL runs out. The replica is started again
// after the attack.
func crashHolder(ctx context.Context, f *faultCtx) (*faultEvent, error) {
	i, how, err := f.victim(ctx)
	if err != nil {
		return nil, err
	}
	p := f.env.procs[i]
	pid := p.cmd.Process.Pid
	at := time.Now()
	if err := p.kill(); err != nil {
		return nil, fmt.Errorf("kill -9 replica %s (pid %d): %w", p.id, pid, err)
	}
	return &faultEvent{
		At: at, Victim: p.id,
		Note:    fmt.Sprintf("kill -9 replica %s (pid %d, %s)", p.id, pid, how),
		cleanup: func(ctx context.Context) error { return f.env.restart(ctx, i) },
	}, nil
}

// pauseHolder stops the lock holder with SIGSTOP for twice the TTL and
// continues it: its lease expires meanwhile, another replica takes the lock
// and sells, and the paused one wakes up inside its critical section,
// believing it still holds the lock.
func pauseHolder(ctx context.Context, f *faultCtx) (*faultEvent, error) {
	i, how, err := f.victim(ctx)
	if err != nil {
		return nil, err
	}
	p := f.env.procs[i]
	at := time.Now()
	if err := stopProc(p.cmd); err != nil {
		return nil, fmt.Errorf("SIGSTOP replica %s: %w", p.id, err)
	}
	pause := 2 * f.h.cfg.FaultTTL
	// Whatever happens, the replica must not stay stopped.
	serr := sleepCtx(ctx, pause)
	if err := contProc(p.cmd); err != nil {
		return nil, fmt.Errorf("SIGCONT replica %s: %w", p.id, err)
	}
	if serr != nil {
		return nil, serr
	}
	return &faultEvent{At: at, Healed: time.Now(), Victim: p.id,
		Note: fmt.Sprintf("SIGSTOP replica %s for %s (%s)", p.id, pause, how)}, nil
}

// restartRedis restarts the redis-server the harness started, while a
// replica holds a redis-lock lease. It keeps nothing on disk, so every
// lease is gone afterwards, and its key counter too.
func restartRedis(ctx context.Context, f *faultCtx) (*faultEvent, error) {
	if f.env.redis.Kind != devstore.KindRedisServer {
		return nil, fmt.Errorf("%w: the harness can restart only a redis-server it started (this Redis is %s)", errSkipped, f.env.redis.Kind)
	}
	_, how, err := f.victim(ctx)
	if err != nil {
		return nil, err
	}
	// The fault strikes when the server is gone, not when the harness
	// decides to stop it: a sale sent in between is no recovery.
	if err := f.env.redis.Stop(); err != nil {
		return nil, fmt.Errorf("stop redis-server: %w", err)
	}
	at := time.Now()
	if err := f.env.redis.Start(ctx); err != nil {
		return nil, fmt.Errorf("start redis-server again: %w", err)
	}
	healed := time.Now()
	return &faultEvent{At: at, Healed: healed,
		Note: fmt.Sprintf("restarted redis-server, no persistence (down %s; a replica was %s)", healed.Sub(at).Round(time.Millisecond), how)}, nil
}

// restartMongo restarts the embedded FerretDB on its data directory.
func restartMongo(ctx context.Context, f *faultCtx) (*faultEvent, error) {
	if f.env.mongo.Kind != devstore.KindFerretDB {
		return nil, fmt.Errorf("%w: the harness can restart only the embedded FerretDB (this MongoDB is %s)", errSkipped, f.env.mongo.Kind)
	}
	_, how, err := f.victim(ctx)
	if err != nil {
		return nil, err
	}
	at := time.Now()
	if err := f.env.mongo.Restart(ctx); err != nil {
		return nil, fmt.Errorf("restart FerretDB: %w", err)
	}
	healed := time.Now()
	return &faultEvent{At: at, Healed: healed,
		Note: fmt.Sprintf("restarted FerretDB on its data (down %s; %s)", healed.Sub(at).Round(time.Millisecond), how)}, nil
}

// killEtcdLeader crashes the leader of the three-member etcd cluster; the
// other two elect a new one. The member is started again after the attack.
func killEtcdLeader(ctx context.Context, f *faultCtx) (*faultEvent, error) {
	if f.env.etcd.Kind != devstore.KindEmbeddedEtcd || len(f.env.etcd.Endpoints) < 3 {
		return nil, fmt.Errorf("%w: needs the harness's three-member embedded etcd (this etcd is %s with %d members)", errSkipped, f.env.etcd.Kind, len(f.env.etcd.Endpoints))
	}
	_, how, err := f.victim(ctx)
	if err != nil {
		return nil, err
	}
	// An election may be under way (the members run in this process, on
	// a busy machine): wait for a leader rather than give up.
	leader := -1
	for wait := time.Now().Add(5 * time.Second); leader < 0; {
		if leader, err = f.env.etcd.Leader(); err != nil {
			return nil, fmt.Errorf("find the etcd leader: %w", err)
		}
		if leader < 0 {
			if time.Now().After(wait) {
				return nil, errors.New("find the etcd leader: no member has known one for 5s")
			}
			if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
				return nil, err
			}
		}
	}
	at := time.Now()
	if err := f.env.etcd.Kill(leader); err != nil {
		return nil, fmt.Errorf("kill etcd member %d: %w", leader, err)
	}
	return &faultEvent{At: at, Victim: "",
		Note:    fmt.Sprintf("killed etcd member %d, the leader (%s)", leader, how),
		cleanup: func(ctx context.Context) error { return f.env.etcd.Start(ctx, leader) },
	}, nil
}

// recovery is how long sales stopped because of the fault: the longest
// time without a completed sale from the moment the fault struck to the
// end of the attack. Measured on completions, not on when requests were
// sent: the harness's workers are busy with requests queued for the lock,
// so when a new request goes out says more about the queue than about the
// fault; and a sale already committing when the fault struck, completing
// just after it, ends the first gap early but not the longest one. It
// returns false when no sale completed after the fault.
func recovery(sales []sale, ev *faultEvent) (time.Duration, bool) {
	ends := make([]time.Time, 0, len(sales))
	for _, s := range sales {
		ends = append(ends, s.end)
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	var longest time.Duration
	prev, resumed := ev.At, false
	for _, e := range ends {
		if !e.After(ev.At) {
			continue
		}
		resumed = true
		longest = max(longest, e.Sub(prev))
		prev = e
	}
	return longest, resumed
}

// tokenCheck checks that fencing tokens kept increasing across the fault:
// every sale that started after the fault was over carries a higher token
// than every sale completed before it struck, and no token was used twice.
//
// With no event (a configuration fault, such as clock skew) only reuse is
// checked.
func tokenCheck(sales []sale, ev *faultEvent) *report.TokenCheck {
	tc := &report.TokenCheck{}
	var healed time.Time // sales sent after this count as "after the fault"
	if ev != nil {
		healed = ev.At
		if ev.Healed.After(healed) {
			healed = ev.Healed
		}
	}
	seen := map[int64]bool{}
	for _, s := range sales {
		if s.fence == 0 {
			continue
		}
		if seen[s.fence] {
			tc.Reused++
		}
		seen[s.fence] = true
		switch {
		case ev == nil:
		case s.end.Before(ev.At):
			tc.Before++
			tc.MaxBefore = max(tc.MaxBefore, s.fence)
		case s.start.After(healed):
			if tc.After == 0 || s.fence < tc.MinAfter {
				tc.MinAfter = s.fence
			}
			tc.After++
		}
	}
	tc.OK = tc.Reused == 0 && (tc.Before == 0 || tc.After == 0 || tc.MinAfter > tc.MaxBefore)
	return tc
}

// refused reports whether a transport error is a refused connection: the
// request never reached a replica, so it cannot have sold anything.
func refused(msg string) bool { return strings.Contains(strings.ToLower(msg), "connection refused") }

// transportKind shortens a transport error to its kind, so that the error
// table groups them.
func transportKind(msg string) string {
	m := strings.ToLower(msg)
	switch {
	case refused(msg):
		return "no answer: connection refused"
	case strings.Contains(m, "reset"), strings.Contains(m, "eof"), strings.Contains(m, "broken pipe"):
		return "no answer: connection reset"
	case strings.Contains(m, "timeout"), strings.Contains(m, "deadline"):
		return "no answer: timeout"
	default:
		return "no answer: other"
	}
}
