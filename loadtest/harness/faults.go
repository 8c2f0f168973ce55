package harness

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stocklock/stocklock/loadtest/drill"
	"github.com/stocklock/stocklock/loadtest/env"
	"github.com/stocklock/stocklock/loadtest/report"
)

// Faults are the fault drills: each fault struck while the load runs,
// against every strategy it applies to, Repeat times.
type Faults struct {
	Faults []string // names of drill.Catalogue
	Repeat int      // runs of every drill
	Drills
}

// DefaultFaults are the fault drills of faults, with the command line's defaults.
func DefaultFaults(faults ...string) *Faults {
	return &Faults{Faults: faults, Repeat: 1, Drills: DefaultDrills()}
}

// Defaults: stock for sales before and after the fault.
func (s Faults) Defaults(c *Config) {
	c.Stock = 2000
	s.timeout(c)
}

func (s Faults) Check(c Config, bad Problem) {
	between(bad, "Repeat", s.Repeat, 1, 100)
	s.check(c, bad)
	if len(s.Faults) == 0 {
		bad("Faults: name at least one")
	}
	if c.Requests > 0 {
		bad("Requests %d: a fault drill is bounded by Duration alone (a fault strikes a quarter into it, and a count could end the attack first)", c.Requests)
	}
	if c.Duration < 3*s.FaultTTL+time.Second {
		bad("Duration %s: a fault drill needs at least 3 × FaultTTL + 1s (%s) to see the fault and the recovery", c.Duration, 3*s.FaultTTL+time.Second)
	}
	if c.SKUs != 1 {
		bad("SKUs %d: fault drills use one hot sku, so that the lock is always contended and tokens compare (each sku's lock counts its own)", c.SKUs)
	}
	if len(c.Replicas) > 0 {
		bad("Faults needs the replicas the harness starts itself (it kills, stops and reconfigures them): drop Replicas")
	} else if c.LocalReplicas < 2 {
		bad("LocalReplicas %d: fault drills need at least 2 replicas (another replica takes the lock over from the one the fault hits, and clock skew sets replica b against the others)", c.LocalReplicas)
	}
	if drill.NeedsNATSCluster(s.Faults) && drill.NeedsNetwork(s.Faults) {
		bad("Faults %s needs a three-server NATS cluster, and the network faults one nats-server behind proxies: run them separately", drill.NATSLeaderKill)
	}
	for _, f := range []string{drill.RedisRestart, drill.RedisClock} {
		if slices.Contains(s.Faults, f) && (c.RedisCluster || drill.NeedsRedisCluster(s.Faults)) {
			bad("Faults %s needs one redis-server, and RedisCluster (or the redis-failover drill) puts the replicas on a Redis Cluster: run them separately", f)
		}
	}
}

func (s Faults) Env(_ Config, o *env.Options) {
	s.env(o)
	o.EtcdCluster, o.RedisClock, o.NATSCluster = drill.NeedsEtcdCluster(s.Faults), drill.NeedsRedisClock(s.Faults), drill.NeedsNATSCluster(s.Faults)
	o.Network = o.Network || drill.NeedsNetwork(s.Faults)
	o.RedisCluster = o.RedisCluster || drill.NeedsRedisCluster(s.Faults)
}

// Run runs every drill of the plan, Repeat times.
func (s Faults) Run(ctx context.Context, h *Harness, rep *report.Report) error {
	rep.Settings.Faults, rep.Settings.Repeat = s.Faults, s.Repeat
	rep.Sections = append(rep.Sections, report.FaultSection)
	rep.Settings.FaultTTL, rep.Settings.WriteStall = s.FaultTTL.String(), s.WriteStall.String()
	drills := drill.Plan(s.Faults, h.cfg.Strategies)
	if len(drills) == 0 {
		return fmt.Errorf("faults %s with --strategies %s: no drill applies", strings.Join(s.Faults, ","), strings.Join(h.cfg.Strategies, ","))
	}
	if err := h.warmup(ctx); err != nil {
		return err
	}
	total := len(drills) * s.Repeat
	began := time.Now()
	for r := 1; r <= s.Repeat; r++ {
		for i, d := range drills {
			n := (r-1)*len(drills) + i + 1 // of total
			if err := h.env.Configure(ctx, d.Flags.PerReplica(h.env.Len())); err != nil {
				return fmt.Errorf("%s, %s: reconfigure the replicas: %w", d.Label, d.Strategy, err)
			}
			eta := ""
			if n > 1 {
				per := time.Since(began) / time.Duration(n-1)
				eta = fmt.Sprintf(", about %s left", (per * time.Duration(total-n+1)).Round(time.Second))
			}
			h.logf("[%d/%d] repeat %d/%d, %s, %s: %s%s", n, total, r, s.Repeat, d.Label, d.Strategy, h.loadText(), eta)
			run, err := h.runStrategy(ctx, d.Strategy, runOpts{drill: &d, repeat: r, drills: s.Drills})
			if err != nil {
				return err
			}
			rec := "-"
			if run.RecoverySeconds != nil {
				rec = fmt.Sprintf("%.2fs", *run.RecoverySeconds)
			}
			h.logf("  → %s: %s; sold %d, oversold %d, lost updates %d, ledger mismatch %d, fenced %d, lease lost %d, sales resumed after %s (%s)",
				d.Strategy, run.FaultNote, run.Sold, run.Oversold, run.LostUpdates, run.LedgerMismatch,
				run.Codes["503 fenced"], run.Codes["503 lease_lost"], rec, run.Verdict)
			rep.Runs = append(rep.Runs, run)
		}
	}
	return nil
}
