package drill

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/loadtest/env"
	"github.com/stocklock/stocklock/pkg/inventory/mongostore"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// The broker faults: they strike the queued strategy's NATS JetStream, or
// a replica's link to it, or slow its consumers (docs/queued.md).
const (
	NATSRestart    = "nats-restart"     // kill -9 the embedded nats-server and start it again
	NATSAckLoss    = "nats-ack-loss"    // a replica's publish acknowledgements lost for ackLoss
	NATSCut        = "nats-cut"         // a replica cut off from NATS for storePartition
	QueuedLag      = "queued-lag"       // every consumer holds each batch lagDelay before applying it
	NATSLeaderKill = "nats-leader-kill" // kill -9 the leader of the queued stream on a three-server cluster
)

// Shapes of the broker faults.
const (
	// ackLoss outlasts two of a publish's 2 s tries, so that a buyer's
	// publish is sent again, and again, while every acknowledgement is
	// lost; the third lands after the heal.
	ackLoss = 5 * time.Second
	// lagDelay outlasts the log's AckWait (5 s), so that a held batch is
	// handed out again while its consumer holds it, and with a batch
	// before it, a buyer's 10 s wait.
	lagDelay = 6 * time.Second
)

// queuedFlag is the replica flag of a queued stream option.
func queuedFlag(name string, v any) string { return fmt.Sprintf("--queued-%s=%v", name, v) }

// natsRestartDrills: the stream in files (the default), and in memory
// (what was published and not yet applied is gone with the server).
func natsRestartDrills() []Drill {
	return []Drill{
		{Label: "nats restart, file storage", Strategy: strategy.Queued, Inject: RestartNATS},
		{Label: "nats restart, memory storage", Strategy: strategy.Queued, Flags: Flags{All: []string{queuedFlag("storage", "memory")}}, Inject: RestartNATS},
	}
}

// ownNATS is nil when the env's NATS is an embedded one the harness
// started, which it can kill and start.
func ownNATS(f *Ctx) error {
	return unless(f.Env.NATS != nil && f.Env.NATS.Kind == devstore.KindEmbeddedNATS,
		"the harness can kill and start only the embedded nats-server it started (this NATS is %s: unset NATS_URL)", natsKind(f.Env))
}

func natsKind(e *env.Env) string {
	if e.NATS == nil {
		return "none"
	}
	return e.NATS.Kind + " at " + e.NATS.URL
}

// RestartNATS kills every server of the embedded NATS with SIGKILL while
// queued sells, and starts them again on their files at their ports: a
// stream in files keeps what it had (a sale published and not yet
// applied is applied after), a stream in memory is gone, its
// configuration too.
var RestartNATS = strike(ownNATS, func(ctx context.Context, f *Ctx, _ int, how string) (*Event, error) {
	n := f.Env.NATS
	for i := range n.Servers() {
		if err := n.Kill(i); err != nil {
			return nil, fmt.Errorf("kill nats-server %d: %w", i, err)
		}
	}
	at := time.Now()
	for i := range n.Servers() {
		if err := n.Start(ctx, i); err != nil {
			return nil, fmt.Errorf("start nats-server %d again: %w", i, err)
		}
	}
	return downFrom(at, "killed the nats-server (SIGKILL) and started it again on its files", how), nil
})

// ackLossDrills: a replica's publish acknowledgements lost, its publishes
// sent again under their message id (the stream keeps one), and with no
// message id (a demonstration: the stream keeps every copy).
func ackLossDrills() []Drill {
	return []Drill{
		{Label: "nats acks lost, dedup on", Strategy: strategy.Queued, Inject: LoseAcks},
		{Label: "nats acks lost, dedup off", Strategy: strategy.Queued, Demo: true, Flags: Flags{All: []string{queuedFlag("dedup", 0)}}, Inject: LoseAcks},
	}
}

// LoseAcks deafens a replica's link to NATS for ackLoss: what it sends
// still lands (publishes are stored), what comes back is dropped
// (publish acknowledgements, the consumers' answers, and its own fetches
// if it consumes), so its buyers' publishes are sent again; then heals.
var LoseAcks = strike(nil, func(ctx context.Context, f *Ctx, i int, how string) (*Event, error) {
	id := f.Env.ID(i)
	return onLinks(ctx, f, i, ackLoss, "deafen replica "+id+"'s NATS link", "",
		fmt.Sprintf("replica %s's NATS link one-way for %s: publishes land, acknowledgements and answers lost (%s)", id, ackLoss, how),
		func() error { return f.Env.Deafen(i, env.LinkNATS) })
})

// PartitionNATS cuts a replica off from NATS for storePartition, then
// heals: its buyers' publishes go nowhere, and its consumers, if it holds
// the hot partition's lease (on MongoDB, which it still reaches), fetch
// nothing.
var PartitionNATS = strike(nil, func(ctx context.Context, f *Ctx, i int, how string) (*Event, error) {
	return cutOff(ctx, f, i, env.LinkNATS, "NATS", storePartition, how)
})

// lagDrills: every consumer slowed by lagDelay a batch, the configuration
// being the fault.
func lagDrills() []Drill {
	return []Drill{{Label: "slow consumer +" + lagDelay.String() + " a batch", Strategy: strategy.Queued,
		Flags: Flags{All: []string{queuedFlag("apply-delay", lagDelay)}}}}
}

// leaderKillDrills: the stream at R3 on the three-server cluster, its
// leader killed; and at R1, its one server killed (no copy to fail over
// to: sales stop until the server is back, after the attack).
func leaderKillDrills() []Drill {
	return []Drill{
		{Label: "nats stream leader kill, R3", Strategy: strategy.Queued, Flags: Flags{All: []string{queuedFlag("replicas", 3)}}, Inject: KillNATSLeader(3)},
		{Label: "nats stream server kill, R1", Strategy: strategy.Queued, Flags: Flags{All: []string{queuedFlag("replicas", 1)}}, Inject: KillNATSLeader(1)},
	}
}

// NeedsNATSCluster reports whether faults need the three-server JetStream cluster.
func NeedsNATSCluster(faults []string) bool { return slices.Contains(faults, NATSLeaderKill) }

// KillNATSLeader kills, with SIGKILL, the server that leads the queued
// stream of replicas copies on the env's three-server cluster, while
// queued sells; the server is started again after the attack.
func KillNATSLeader(replicas int) Injector {
	stream := mongostore.QueuedStream(env.DB, mongostore.QueuedOptions{Replicas: replicas})
	return strike(func(f *Ctx) error {
		if err := ownNATS(f); err != nil {
			return err
		}
		return unless(f.Env.NATS.Servers() >= 3, "needs the harness's three-server JetStream cluster (this NATS has %d)", f.Env.NATS.Servers())
	}, func(ctx context.Context, f *Ctx, _ int, how string) (*Event, error) {
		leader := -1
		switch found, err := until(ctx, 5*time.Second, 20*time.Millisecond, func() (bool, error) {
			var err error
			leader, err = f.Env.NATS.StreamLeader(ctx, stream)
			return err == nil, nil
		}); {
		case err != nil:
			return nil, err
		case !found:
			return nil, errors.New("find the leader of stream " + stream + ": none for 5s")
		}
		at := time.Now()
		if err := f.Env.NATS.Kill(leader); err != nil {
			return nil, fmt.Errorf("kill nats-server %d: %w", leader, err)
		}
		return &Event{At: at, Shape: "R" + strconv.Itoa(replicas),
			Note:    fmt.Sprintf("killed nats-server %d, the leader of %s (R%d) (%s)", leader, stream, replicas, how),
			Cleanup: func(ctx context.Context) error { return f.Env.NATS.Start(ctx, leader) },
		}, nil
	})
}
