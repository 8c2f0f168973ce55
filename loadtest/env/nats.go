package env

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/stocklock/stocklock/internal/devstore"
)

// The queued strategy's broker in an Env, and what its drills strike
// (loadtest/drill/queued.go): one nats-server, or a three-server
// JetStream cluster (Options.NATSCluster); a replica's link to it behind
// its proxy (Options.Network).

// startNATS starts NATS: NATS_URL, else one embedded server, or the
// three-server cluster of Options.NATSCluster.
func (e *Env) startNATS(ctx context.Context, logger *slog.Logger) (err error) {
	t0 := time.Now()
	if e.opt.NATSCluster {
		e.logf("starting a three-server embedded JetStream cluster (for the nats-leader-kill drill)...")
		e.NATS, err = devstore.StartNATSCluster(ctx, logger, 3)
	} else {
		e.logf("starting NATS (NATS_URL, else an embedded nats-server with JetStream)...")
		e.NATS, err = devstore.StartNATS(ctx, logger)
	}
	if err != nil {
		return fmt.Errorf("start NATS: %w", err)
	}
	e.logf("  NATS: %s at %s [%s]", e.NATS.Kind, e.NATS.URL, time.Since(t0).Round(time.Millisecond))
	return nil
}

// natsURL is the NATS the replicas use, "" when none runs.
func (e *Env) natsURL() string {
	if e.NATS == nil {
		return ""
	}
	return e.NATS.URL
}

// proxyNATS is the NATS URL of replica id, through its proxy.
func (e *Env) proxyNATS(id string) (string, error) {
	if e.NATS == nil {
		return "", nil
	}
	// A lone nats-server advertises no other address to its clients, so
	// a replica reconnects through its proxy too.
	u, _ := url.Parse(e.NATS.URL)
	var err error
	u.Host, err = e.proxy(id, LinkNATS, u.Host)
	return u.String(), err
}

// canProxyNATS says why the NATS cannot be put behind proxies: a cluster,
// whose servers tell their clients each other's addresses.
func (e *Env) canProxyNATS() error {
	if u, err := url.Parse(e.natsURL()); e.NATS != nil && (err != nil || u.Host == "" || strings.Contains(e.NATS.URL, ",")) {
		return fmt.Errorf("%w: network drills need one NATS server, nats://host:port (a cluster's servers tell clients each other's addresses)", ErrUnsupported)
	}
	return nil
}

// Deafen drops everything replica i's links (all when none given) bring
// back, while what it sends still arrives: requests land and their
// answers are lost (a publish stored, its acknowledgement never heard).
// Heal ends it.
func (e *Env) Deafen(i int, links ...Link) error {
	return e.withToxic(i, links, "deaf", "timeout", `{"timeout":0}`, "downstream")
}
