package env

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/stocklock/stocklock/pkg/strategy"
)

// toxiproxyVersion is the Toxiproxy the network drills run (the module's
// Version variable says "git" outside its own release builds).
const toxiproxyVersion = "v2.5.0"

// Link names one of a replica's links to its stores.
type Link string

// The links a network drill can strike: named after the lock service
// behind each (MongoDB also holds the items and orders), and the queued
// strategy's broker.
const (
	LinkMongo Link = Link(strategy.LockMongo)
	LinkRedis Link = Link(strategy.LockRedis)
	LinkEtcd  Link = Link(strategy.LockEtcd)
	LinkNATS  Link = "nats"
)

// Links are every link a replica has.
var Links = []Link{LinkMongo, LinkRedis, LinkEtcd, LinkNATS}

// newNetwork runs Toxiproxy in this process: with Options.Network, each
// replica reaches MongoDB, Redis and etcd through proxies of its own, so
// that a drill can cut, slow or reset one replica's links and not the
// others'. A replica restarted keeps its proxies (and their ports),
// named <replica id>-<link> in the server's collection.
func newNetwork() *toxiproxy.ApiServer {
	return toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
}

// proxy returns the address replica id reaches upstream at through link,
// starting the proxy the first time.
func (e *Env) proxy(id string, link Link, upstream string) (string, error) {
	p, err := e.net.Collection.Get(id + "-" + string(link))
	if err != nil {
		p = toxiproxy.NewProxy(e.net, id+"-"+string(link), "127.0.0.1:0", upstream)
		if err := e.net.Collection.Add(p, true); err != nil {
			return "", fmt.Errorf("toxiproxy %s: %w", p.Name, err)
		}
	}
	return p.Listen, nil
}

// proxies returns replica i's proxies of links (all when none given).
func (e *Env) proxies(i int, links []Link) ([]*toxiproxy.Proxy, error) {
	if e.net == nil {
		return nil, fmt.Errorf("%w: no network proxies (start the env with Options.Network)", ErrUnsupported)
	}
	if len(links) == 0 {
		links = Links
	}
	var out []*toxiproxy.Proxy
	for _, l := range links {
		if p, err := e.net.Collection.Get(e.procs[i].id + "-" + string(l)); err == nil {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: replica %s has no proxied link among %v", ErrUnsupported, e.procs[i].id, links)
	}
	return out, nil
}

// proxyEnv rewrites the stores' addresses in a replica's environment to
// its proxies (Start checked that it can: canProxy).
func (e *Env) proxyEnv(id string) (mongoURI, redisAddr string, etcd []string, natsURL string, err error) {
	u, _ := url.Parse(e.Mongo.URI)
	if u.Host, err = e.proxy(id, LinkMongo, u.Host); err != nil {
		return "", "", nil, "", err
	}
	q := u.Query()
	// The proxy is not the server's advertised address: talk to it as
	// the one server there is.
	q.Set("directConnection", "true")
	u.RawQuery = q.Encode()
	if redisAddr, err = e.proxy(id, LinkRedis, e.Redis.Addr); err != nil {
		return "", "", nil, "", err
	}
	for _, ep := range e.Etcd.Endpoints {
		eu, _ := url.Parse(ep)
		if eu.Host, err = e.proxy(id, LinkEtcd, eu.Host); err != nil {
			return "", "", nil, "", err
		}
		etcd = append(etcd, eu.String())
	}
	natsURL, err = e.proxyNATS(id)
	return u.String(), redisAddr, etcd, natsURL, err
}

// canProxy says why the stores cannot be put behind proxies, nil when
// they can: a Redis Cluster (its nodes announce their own addresses), a
// MongoDB URI of several hosts, several etcd endpoints.
func (e *Env) canProxy() error {
	if e.Cluster != nil {
		return fmt.Errorf("%w: network drills on a Redis Cluster", ErrUnsupported)
	}
	u, err := url.Parse(e.Mongo.URI)
	if err != nil || strings.Contains(u.Host, ",") || u.Scheme != "mongodb" {
		return fmt.Errorf("%w: network drills need a MongoDB URI of one host (mongodb://host:port)", ErrUnsupported)
	}
	for _, ep := range e.Etcd.Endpoints {
		eu, err := url.Parse(ep)
		if err != nil || eu.Host == "" || len(e.Etcd.Endpoints) > 1 {
			return fmt.Errorf("%w: network drills need one etcd endpoint of the form http://host:port", ErrUnsupported)
		}
	}
	return e.canProxyNATS()
}

// Partition cuts replica i's links (all when none given): nothing passes
// either way, and connections, old and new, hang, as behind a partition
// that drops packets. Heal ends it.
func (e *Env) Partition(i int, links ...Link) error {
	return e.withToxic(i, links, "partition", "timeout", `{"timeout":0}`, "upstream", "downstream")
}

// Slow adds latency, with jitter, to everything replica i sends and
// receives on its links (all when none given), until Heal.
func (e *Env) Slow(i int, latency, jitter time.Duration, links ...Link) error {
	attrs := fmt.Sprintf(`{"latency":%d,"jitter":%d}`, latency.Milliseconds(), jitter.Milliseconds())
	return e.withToxic(i, links, "latency", "latency", attrs, "downstream")
}

// CutAfter closes each of replica i's connections on its links (all when
// none given) once bytes have come back on it, until Heal: under load,
// connections die mid-reply at a steady rate.
func (e *Env) CutAfter(i int, bytes int64, links ...Link) error {
	return e.withToxic(i, links, "cut", "limit_data", fmt.Sprintf(`{"bytes":%d}`, bytes), "downstream")
}

// Heal removes every toxic from replica i's links. Removing a partition
// (Toxiproxy's timeout toxic) also closes the connections that crossed
// it: the bytes it held back are gone (TCP would have sent them again), so
// those connections are out of step. Latency loses nothing, and its
// connections stay open.
func (e *Env) Heal(ctx context.Context, i int) error {
	ps, err := e.proxies(i, nil)
	for _, p := range ps {
		p.Toxics.ResetToxics(ctx)
	}
	return err
}

// withToxic adds a toxic to replica i's links, on the streams given.
func (e *Env) withToxic(i int, links []Link, name, kind, attrs string, streams ...string) error {
	ps, err := e.proxies(i, links)
	if err != nil {
		return err
	}
	for _, p := range ps {
		for _, s := range streams {
			js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name+"-"+s, kind, s, attrs)
			if _, err := p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
				// No half-struck fault: take back what was added.
				for _, q := range ps {
					q.Toxics.ResetToxics(context.Background())
				}
				return fmt.Errorf("toxiproxy %s: add %s: %w", p.Name, kind, err)
			}
		}
	}
	return nil
}

// Networked reports whether the replicas reach the stores through proxies
// (Options.Network), so that the network faults can strike.
func (e *Env) Networked() bool { return e.net != nil }

// Proc is one replica as Procs sees it.
type Proc struct {
	ID, Base string
	Pid      int
}

// Procs returns every replica's id, base URL and pid, read together under
// the lock that a restart takes: safe while drills restart replicas.
func (e *Env) Procs() []Proc {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]Proc, len(e.procs))
	for i, p := range e.procs {
		out[i] = Proc{ID: p.id, Base: p.base, Pid: p.cmd.Process.Pid}
	}
	return out
}
