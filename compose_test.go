package stocklock_test

// These tests keep compose.yaml, services/stock/Dockerfile and
// .github/workflows/ci.yml honest on a machine with no Docker engine:
//
//   - compose.yaml is loaded with compose-go, the loader docker compose
//     itself uses (schema validation, interpolation, profiles, merge keys),
//     and its structure is checked: two replicas, healthchecks, depends_on
//     conditions, environment wiring, pinned images, profiles.
//   - The Dockerfile's `go build` commands are parsed out of the file and
//     run as written (unless -short), and the binaries are checked to be
//     static; the health-check probe built into the image is run against a
//     local server.
//   - The CI workflow uses the same server images as compose.yaml and runs
//     the README's test command.

import (
	"bufio"
	"context"
	"debug/elf"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/distribution/reference"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/connstring"
	"go.yaml.in/yaml/v3"

	"github.com/stocklock/stocklock/internal/testskip"
	"github.com/stocklock/stocklock/services/stock/server"
)

const (
	composeFile = "compose.yaml"
	dockerfile  = "services/stock/Dockerfile"
	workflow    = ".github/workflows/ci.yml"

	// The port the stock service listens on inside its container (STOCK_ADDR).
	stockPort = "8080"
)

// envExample is the template of the secrets compose.yaml requires.
const envExample = ".env.example"

// loadCompose loads compose.yaml as `docker compose --profile P ... config`
// would after `cp .env.example .env`, with no other environment, so that
// every ${VAR:-default} takes its default whatever the shell running the
// test has exported.
func loadCompose(t *testing.T, profiles ...string) *types.Project {
	t.Helper()
	p, err := loadComposeEnv(profiles, envExample)
	if err != nil {
		t.Fatalf("load %s with profiles %v: %v", composeFile, profiles, err)
	}
	return p
}

// loadComposeEnv loads compose.yaml with the variables of envFiles only.
func loadComposeEnv(profiles []string, envFiles ...string) (*types.Project, error) {
	opts, err := cli.NewProjectOptions([]string{composeFile},
		cli.WithWorkingDirectory("."),
		cli.WithProfiles(profiles),
		cli.WithConsistency(true),
		cli.WithResolvedPaths(true),
		cli.WithEnvFiles(envFiles...),
		cli.WithDotEnv,
	)
	if err != nil {
		return nil, fmt.Errorf("compose options: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return opts.LoadProject(ctx)
}

// TestComposeCredentials: MongoDB has a root user and Redis a password,
// both from the environment (.env, templated by .env.example), and the
// replicas and the harness use them; without them compose refuses to
// start, naming what to set. The replicas run in demo mode explicitly,
// with an admin token, and a stop grace period that covers a decrement's
// whole budget.
func TestComposeCredentials(t *testing.T) {
	vars := readEnvFile(t, envExample)
	for _, k := range []string{"MONGO_ROOT_USER", "MONGO_ROOT_PASSWORD", "REDIS_PASSWORD", "ADMIN_TOKEN", "GRAFANA_ADMIN_PASSWORD"} {
		if vars[k] == "" {
			t.Errorf("%s does not set %s", envExample, k)
		}
	}
	if _, err := loadComposeEnv(nil); err == nil || !strings.Contains(err.Error(), ".env.example") {
		t.Errorf("compose loads without credentials (%v); it must refuse and point at %s", err, envExample)
	}
	p := loadCompose(t)
	mongo := service(t, p, "mongo")
	if env(t, mongo, "MONGO_INITDB_ROOT_USERNAME") != vars["MONGO_ROOT_USER"] || env(t, mongo, "MONGO_INITDB_ROOT_PASSWORD") != vars["MONGO_ROOT_PASSWORD"] {
		t.Errorf("mongo: the root user is not the one of %s", envExample)
	}
	redis := service(t, p, "redis")
	if i := slices.Index(redis.Command, "--requirepass"); i < 0 || i+1 >= len(redis.Command) || redis.Command[i+1] != vars["REDIS_PASSWORD"] {
		t.Errorf("redis: command %q does not require the password of %s", redis.Command, envExample)
	}
	if env(t, redis, "REDISCLI_AUTH") != vars["REDIS_PASSWORD"] {
		t.Errorf("redis: the healthcheck's redis-cli has no password")
	}
	for _, name := range []string{"stock-a", "stock-b"} {
		s := service(t, p, name)
		cs, err := connstring.ParseAndValidate(env(t, s, "MONGO_URI"))
		if err != nil || cs.Username != vars["MONGO_ROOT_USER"] || cs.Password != vars["MONGO_ROOT_PASSWORD"] || cs.AuthSource != "admin" {
			t.Errorf("%s: MONGO_URI does not log in as the root user (authSource admin): %v", name, err)
		}
		if env(t, s, "REDIS_PASSWORD") != vars["REDIS_PASSWORD"] || env(t, s, "ADMIN_TOKEN") != vars["ADMIN_TOKEN"] {
			t.Errorf("%s: REDIS_PASSWORD or ADMIN_TOKEN is not the one of %s", name, envExample)
		}
		if env(t, s, "DEMO") != "true" {
			t.Errorf("%s: the teaching stack must turn demo mode on explicitly (DEMO=true)", name)
		}
		if budget := server.DefaultConfig().WriteBudget(); s.StopGracePeriod == nil || time.Duration(*s.StopGracePeriod) < budget {
			t.Errorf("%s: stop_grace_period %v does not cover a decrement's budget (%v)", name, s.StopGracePeriod, budget)
		}
	}
	lt := service(t, loadCompose(t, "loadtest"), "loadtest")
	if env(t, lt, "LOADTEST_ADMIN_TOKEN") != vars["ADMIN_TOKEN"] {
		t.Errorf("loadtest: LOADTEST_ADMIN_TOKEN is not the replicas' ADMIN_TOKEN")
	}
}

// TestComposeObserve: the observe profile runs Prometheus scraping both
// replicas with deploy/prometheus/prometheus.yml, and Grafana with the
// provisioned datasource and dashboard, on loopback ports, images pinned.
func TestComposeObserve(t *testing.T) {
	p := loadCompose(t, "observe")
	prom, graf := service(t, p, "prometheus"), service(t, p, "grafana")
	for _, s := range []types.ServiceConfig{prom, graf} {
		if !slices.Equal(s.Profiles, []string{"observe"}) {
			t.Errorf("%s: profiles %v, want [observe]", s.Name, s.Profiles)
		}
		if !regexp.MustCompile(`:v?\d+\.\d+\.\d+$`).MatchString(s.Image) {
			t.Errorf("%s: image %q is not pinned to a release", s.Name, s.Image)
		}
		for _, port := range s.Ports {
			if port.HostIP != "127.0.0.1" {
				t.Errorf("%s: port published on %q, want loopback only", s.Name, port.HostIP)
			}
		}
	}
	mount := func(s types.ServiceConfig, target string) string {
		t.Helper()
		for _, v := range s.Volumes {
			if v.Target == target {
				if _, err := os.Stat(v.Source); err != nil {
					t.Errorf("%s: %s is mounted from %s: %v", s.Name, target, v.Source, err)
				}
				return v.Source
			}
		}
		t.Errorf("%s: nothing mounted at %s", s.Name, target)
		return ""
	}
	b, err := os.ReadFile(mount(prom, "/etc/prometheus/prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, sc := range cfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			targets = append(targets, st.Targets...)
		}
	}
	if !slices.Equal(targets, []string{"stock-a:" + stockPort, "stock-b:" + stockPort}) {
		t.Errorf("prometheus scrapes %v, want both replicas on %s", targets, stockPort)
	}
	prov := mount(graf, "/etc/grafana/provisioning")
	dash := mount(graf, "/var/lib/grafana/dashboards")
	ds, _ := os.ReadFile(filepath.Join(prov, "datasources", "prometheus.yml"))
	if !strings.Contains(string(ds), "url: http://prometheus:9090") {
		t.Errorf("the Grafana datasource does not point at the prometheus service:\n%s", ds)
	}
	dp, _ := os.ReadFile(filepath.Join(prov, "dashboards", "stocklock.yml"))
	if !strings.Contains(string(dp), "path: /var/lib/grafana/dashboards") {
		t.Errorf("the dashboard provider does not read the mounted dashboards:\n%s", dp)
	}
	if _, err := os.Stat(filepath.Join(dash, "stocklock.json")); err != nil {
		t.Errorf("no stocklock dashboard: %v", err)
	}
	if env(t, graf, "GF_SECURITY_ADMIN_PASSWORD") == "admin" {
		t.Errorf("grafana keeps the default admin password")
	}
}

// readEnvFile reads KEY=VALUE lines, skipping comments and blanks.
func readEnvFile(t *testing.T, name string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for line := range strings.SplitSeq(string(b), "\n") {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			vars[k] = v
		}
	}
	return vars
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, err := p.GetService(name)
	if err != nil {
		t.Fatalf("%s: service %q: %v", composeFile, name, err)
	}
	return s
}

func env(t *testing.T, s types.ServiceConfig, key string) string {
	t.Helper()
	v, ok := s.Environment[key]
	if !ok || v == nil || *v == "" {
		t.Fatalf("service %s: environment %s is not set", s.Name, key)
	}
	return *v
}

// replicaSpec is what the compose file promises for each pair of replicas.
type replicaSpec struct {
	profile   string   // "" for the default scenario
	replicas  []string // the two stock services
	ports     []string // their published host ports
	mongo     []string // the hosts MONGO_URI must name
	replSet   string   // the replicaSet MONGO_URI must name, if any
	mongoDeps []string // what the replicas wait for before MongoDB is usable
	mongoCond string   // and with which condition
	loadtest  string   // the harness service that drives them
	ltProfile string
}

var scenarios = []replicaSpec{
	{
		replicas:  []string{"stock-a", "stock-b"},
		ports:     []string{"8081", "8082"},
		mongo:     []string{"mongo:27017"},
		mongoDeps: []string{"mongo"},
		mongoCond: types.ServiceConditionHealthy,
		loadtest:  "loadtest",
		ltProfile: "loadtest",
	},
	{
		profile:   "replset",
		replicas:  []string{"stock-a-rs", "stock-b-rs"},
		ports:     []string{"8083", "8084"},
		mongo:     []string{"mongo1:27017", "mongo2:27017", "mongo3:27017"},
		replSet:   "rs0",
		mongoDeps: []string{"mongo-rs-init"},
		mongoCond: types.ServiceConditionCompletedSuccessfully,
		loadtest:  "loadtest-rs",
		ltProfile: "loadtest-rs",
	},
}

func TestComposeDefaultScenario(t *testing.T) {
	p := loadCompose(t)
	// `docker compose up` starts exactly the two-server scenario and the
	// live page that races them.
	want := []string{"etcd", "live", "mongo", "nats", "redis", "stock-a", "stock-b"}
	got := p.ServiceNames()
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("services without a profile = %v, want %v", got, want)
	}
	for _, name := range []string{"loadtest", "mongo1", "mongo-rs-init", "stock-a-rs", "loadtest-rs",
		"redis-node-1", "redis-cluster-init", "stock-a-rc", "loadtest-rc"} {
		if _, err := p.GetDisabledService(name); err != nil {
			t.Errorf("%s should exist but only under a profile: %v", name, err)
		}
	}
}

func TestComposeReplicas(t *testing.T) {
	all := loadCompose(t, "*")
	for _, sc := range scenarios {
		t.Run(sc.replicas[0], func(t *testing.T) {
			ids := map[string]string{}
			for i, name := range sc.replicas {
				s := service(t, all, name)
				if !slices.Equal(s.Profiles, profileList(sc.profile)) {
					t.Errorf("%s: profiles %v, want %v", name, s.Profiles, profileList(sc.profile))
				}
				checkStockBuild(t, s)
				checkNotRoot(t, s)

				// Identity: REPLICA_ID is distinct, so every response and
				// every order names the replica that made it.
				id := env(t, s, "REPLICA_ID")
				if other, dup := ids[id]; dup {
					t.Errorf("%s and %s share REPLICA_ID %q", other, name, id)
				}
				ids[id] = name

				// Listening address and published port.
				if addr := env(t, s, "STOCK_ADDR"); addr != ":"+stockPort {
					t.Errorf("%s: STOCK_ADDR = %q, want %q", name, addr, ":"+stockPort)
				}
				if len(s.Ports) != 1 {
					t.Fatalf("%s: %d published ports, want 1", name, len(s.Ports))
				}
				port := s.Ports[0]
				if fmt.Sprint(port.Target) != stockPort || port.Published != sc.ports[i] {
					t.Errorf("%s: port %s->%d, want %s->%s", name, port.Published, port.Target, sc.ports[i], stockPort)
				}
				if port.HostIP != "127.0.0.1" {
					t.Errorf("%s: port published on %q, want loopback only", name, port.HostIP)
				}

				// Health: the replica is healthy when it can serve, which is
				// what loadtest waits for.
				hc := checkHealthcheck(t, s)
				if !slices.ContainsFunc(hc, func(a string) bool {
					return a == "http://127.0.0.1:"+stockPort+"/readyz" || a == "http://127.0.0.1:"+stockPort+"/healthz"
				}) {
					t.Errorf("%s: healthcheck %q does not probe /readyz or /healthz on port %s", name, hc, stockPort)
				}
				if hc[1] != "/probe" {
					t.Errorf("%s: healthcheck runs %q; the distroless image only has /probe", name, hc[1])
				}

				// Wiring: MongoDB and Redis are services of this file, and the
				// replica waits for them.
				cs, err := connstring.ParseAndValidate(env(t, s, "MONGO_URI"))
				if err != nil {
					t.Fatalf("%s: MONGO_URI: %v", name, err)
				}
				if !slices.Equal(cs.Hosts, sc.mongo) {
					t.Errorf("%s: MONGO_URI hosts %v, want %v", name, cs.Hosts, sc.mongo)
				}
				if cs.ReplicaSet != sc.replSet {
					t.Errorf("%s: MONGO_URI replicaSet %q, want %q", name, cs.ReplicaSet, sc.replSet)
				}
				for _, h := range cs.Hosts {
					checkServiceAddr(t, all, name, "MONGO_URI", h, "27017")
				}
				env(t, s, "MONGO_DB")
				checkServiceAddr(t, all, name, "REDIS_ADDR", env(t, s, "REDIS_ADDR"), "6379")
				for _, dep := range sc.mongoDeps {
					checkDependsOn(t, s, dep, sc.mongoCond)
				}
				checkDependsOn(t, s, "redis", types.ServiceConditionHealthy)

				// etcd for the etcd-lock strategy: client URLs of the etcd
				// service, which the replica waits for.
				eps := strings.Split(env(t, s, "ETCD_ENDPOINTS"), ",")
				for _, ep := range eps {
					u, err := url.Parse(ep)
					if err != nil || u.Scheme != "http" {
						t.Errorf("%s: ETCD_ENDPOINTS entry %q: want http://<service>:2379", name, ep)
						continue
					}
					checkServiceAddr(t, all, name, "ETCD_ENDPOINTS", u.Host, "2379")
				}
				checkDependsOn(t, s, "etcd", types.ServiceConditionHealthy)

				// NATS with JetStream for the queued strategy.
				if u, err := url.Parse(env(t, s, "NATS_URL")); err != nil || u.Scheme != "nats" {
					t.Errorf("%s: NATS_URL %q: want nats://<service>:4222", name, env(t, s, "NATS_URL"))
				} else {
					checkServiceAddr(t, all, name, "NATS_URL", u.Host, "4222")
				}
				checkDependsOn(t, s, "nats", types.ServiceConditionHealthy)
			}
			a, b := service(t, all, sc.replicas[0]), service(t, all, sc.replicas[1])
			if a.Environment["MONGO_URI"] == nil || b.Environment["MONGO_URI"] == nil ||
				*a.Environment["MONGO_URI"] != *b.Environment["MONGO_URI"] ||
				*a.Environment["MONGO_DB"] != *b.Environment["MONGO_DB"] {
				t.Errorf("%s and %s must share one MongoDB database", a.Name, b.Name)
			}
		})
	}
}

func TestComposeServers(t *testing.T) {
	all := loadCompose(t, "*")
	for _, name := range []string{"mongo", "redis", "etcd", "mongo1", "mongo2", "mongo3"} {
		s := service(t, all, name)
		hc := checkHealthcheck(t, s)
		want := "mongosh"
		switch name {
		case "redis":
			want = "redis-cli"
		case "etcd":
			want = "etcdctl"
		}
		if hc[1] != want {
			t.Errorf("%s: healthcheck runs %q, want %s", name, hc[1], want)
		}
		if name == "etcd" && !slices.Contains(hc, "health") {
			t.Errorf("etcd: healthcheck %q is not `etcdctl endpoint health`", hc)
		}
	}
	checkEtcdService(t, all)
	// Every image that is pulled, not built, names a version: `latest`
	// changes under the reader's feet, and so would the lessons.
	for name, s := range all.Services {
		if s.Build != nil {
			continue
		}
		ref, err := reference.ParseNormalizedNamed(s.Image)
		if err != nil {
			t.Errorf("%s: image %q: %v", name, s.Image, err)
			continue
		}
		tagged, ok := ref.(reference.Tagged)
		_, digested := ref.(reference.Digested)
		if !digested && (!ok || tagged.Tag() == "latest") {
			t.Errorf("%s: image %q is not pinned to a version", name, s.Image)
		}
	}
	if img := service(t, all, "mongo").Image; !regexp.MustCompile(`^mongo:\d+\.\d+`).MatchString(img) {
		t.Errorf("mongo image %q: want the official image pinned to a major.minor", img)
	}
	if img := service(t, all, "redis").Image; !regexp.MustCompile(`^redis:\d+\.\d+`).MatchString(img) {
		t.Errorf("redis image %q: want the official image pinned to a major.minor", img)
	}
}

func TestComposeReplicaSet(t *testing.T) {
	p := loadCompose(t, "replset")
	members := []string{"mongo1", "mongo2", "mongo3"}
	for _, m := range members {
		s := service(t, p, m)
		if !slices.Equal(s.Profiles, []string{"replset"}) {
			t.Errorf("%s: profiles %v, want [replset]", m, s.Profiles)
		}
		cmd := []string(s.Command)
		i := slices.Index(cmd, "--replSet")
		if i < 0 || i+1 >= len(cmd) || cmd[i+1] != "rs0" {
			t.Errorf("%s: command %q does not start a member of rs0", m, cmd)
		}
		if service(t, p, "mongo").Image != s.Image {
			t.Errorf("%s: image %q differs from mongo's %q", m, s.Image, service(t, p, "mongo").Image)
		}
	}
	// The init job waits for all three, initiates rs0 with all three, and
	// the replicas wait for it to finish.
	init := service(t, p, "mongo-rs-init")
	script := strings.Join(append(slices.Clone([]string(init.Entrypoint)), init.Command...), "\n")
	if !strings.Contains(script, "rs.initiate") || !strings.Contains(script, `_id: "rs0"`) {
		t.Errorf("mongo-rs-init does not initiate rs0:\n%s", script)
	}
	for _, m := range members {
		checkDependsOn(t, init, m, types.ServiceConditionHealthy)
		if !strings.Contains(script, `host: "`+m+`:27017"`) {
			t.Errorf("mongo-rs-init does not add %s to rs0", m)
		}
	}
	if init.HealthCheck != nil && !init.HealthCheck.Disable {
		t.Errorf("mongo-rs-init is a one-shot job; service_completed_successfully needs no healthcheck")
	}
	for _, r := range []string{"stock-a-rs", "stock-b-rs"} {
		if wc := env(t, service(t, p, r), "WRITE_CONCERN"); wc != "majority" {
			t.Errorf("%s: WRITE_CONCERN = %q, want majority", r, wc)
		}
	}
}

// TestComposeRedisCluster: the redis-cluster profile runs the topology of
// internal/devstore's StartRedisCluster (three masters with one replica
// each, six redis-server nodes without persistence, joined by a one-shot
// redis-cli --cluster create --cluster-replicas 1), and two replicas whose
// redis-lock leases live on it, configured with REDIS_CLUSTER_ADDRS alone,
// in a way the service's own configuration check accepts.
func TestComposeRedisCluster(t *testing.T) {
	const masters, replicasPerMaster = 3, 1 // devstore's clusterMasters, clusterReplicas
	p := loadCompose(t, "redis-cluster", "loadtest-rc")
	vars := readEnvFile(t, envExample)
	redisImage := service(t, p, "redis").Image

	var nodes []string
	for i := 1; i <= masters*(1+replicasPerMaster); i++ {
		name := fmt.Sprintf("redis-node-%d", i)
		nodes = append(nodes, name)
		s := service(t, p, name)
		if !slices.Equal(s.Profiles, []string{"redis-cluster"}) {
			t.Errorf("%s: profiles %v, want [redis-cluster]", name, s.Profiles)
		}
		if s.Image != redisImage {
			t.Errorf("%s: image %q differs from redis's %q", name, s.Image, redisImage)
		}
		if hc := checkHealthcheck(t, s); hc[1] != "redis-cli" {
			t.Errorf("%s: healthcheck runs %q, want redis-cli", name, hc[1])
		}
		if env(t, s, "REDISCLI_AUTH") != vars["REDIS_PASSWORD"] {
			t.Errorf("%s: the healthcheck's redis-cli has no password", name)
		}
		cmd := []string(s.Command)
		if len(cmd) == 0 || cmd[0] != "redis-server" {
			t.Fatalf("%s: command %q does not run redis-server", name, cmd)
		}
		flags := map[string]string{}
		for j := 1; j+1 < len(cmd); j += 2 {
			flags[cmd[j]] = cmd[j+1]
		}
		for flag, want := range map[string]string{
			"--cluster-enabled":           "yes",
			"--save":                      "", // no persistence, as devstore's nodes
			"--appendonly":                "no",
			"--cluster-announce-hostname": name,
			"--requirepass":               vars["REDIS_PASSWORD"],
			"--masterauth":                vars["REDIS_PASSWORD"], // a replica syncs from its master
		} {
			if got, ok := flags[flag]; !ok || got != want {
				t.Errorf("%s: %s = %q (set: %v), want %q", name, flag, got, ok, want)
			}
		}
		if flags["--cluster-config-file"] == "" || flags["--cluster-node-timeout"] == "" {
			t.Errorf("%s: command %q lacks --cluster-config-file or --cluster-node-timeout", name, cmd)
		}
	}

	// The one-shot job waits for every node and creates the cluster from
	// all of them, one replica per master.
	init := service(t, p, "redis-cluster-init")
	if !slices.Equal(init.Profiles, []string{"redis-cluster"}) {
		t.Errorf("redis-cluster-init: profiles %v, want [redis-cluster]", init.Profiles)
	}
	if init.HealthCheck != nil && !init.HealthCheck.Disable {
		t.Errorf("redis-cluster-init is a one-shot job; service_completed_successfully needs no healthcheck")
	}
	script := strings.Join(append(slices.Clone([]string(init.Entrypoint)), init.Command...), "\n")
	create := regexp.MustCompile(`redis-cli --cluster create ((?:\S+:\d+ )+)--cluster-replicas (\d+) --cluster-yes`).FindStringSubmatch(script)
	if create == nil {
		t.Fatalf("redis-cluster-init does not run redis-cli --cluster create ... --cluster-replicas N --cluster-yes:\n%s", script)
	}
	var created []string
	for _, addr := range strings.Fields(create[1]) {
		host, port, _ := net.SplitHostPort(addr)
		if port != "6379" {
			t.Errorf("redis-cluster-init: node %s: want port 6379", addr)
		}
		created = append(created, host)
	}
	if !slices.Equal(created, nodes) {
		t.Errorf("redis-cluster-init creates the cluster from %v, want %v", created, nodes)
	}
	if create[2] != fmt.Sprint(replicasPerMaster) {
		t.Errorf("redis-cluster-init: --cluster-replicas %s, want %d", create[2], replicasPerMaster)
	}
	for _, n := range nodes {
		checkDependsOn(t, init, n, types.ServiceConditionHealthy)
	}

	// The replicas: a cluster instead of a Redis, validated as the service
	// validates it at start-up.
	ids := map[string]bool{}
	for i, name := range []string{"stock-a-rc", "stock-b-rc"} {
		s := service(t, p, name)
		if !slices.Equal(s.Profiles, []string{"redis-cluster"}) {
			t.Errorf("%s: profiles %v, want [redis-cluster]", name, s.Profiles)
		}
		checkStockBuild(t, s)
		checkNotRoot(t, s)
		id := env(t, s, "REPLICA_ID")
		if ids[id] {
			t.Errorf("%s: REPLICA_ID %q is not unique", name, id)
		}
		ids[id] = true
		if len(s.Ports) != 1 || s.Ports[0].HostIP != "127.0.0.1" || s.Ports[0].Published != fmt.Sprint(8085+i) {
			t.Errorf("%s: ports %+v, want 127.0.0.1:%d->%s", name, s.Ports, 8085+i, stockPort)
		}
		addrs := strings.Split(env(t, s, "REDIS_CLUSTER_ADDRS"), ",")
		var hosts []string
		for _, a := range addrs {
			checkServiceAddr(t, p, name, "REDIS_CLUSTER_ADDRS", a, "6379")
			host, _, _ := net.SplitHostPort(a)
			hosts = append(hosts, host)
		}
		if !slices.Equal(hosts, nodes) {
			t.Errorf("%s: REDIS_CLUSTER_ADDRS names %v, want every node %v", name, hosts, nodes)
		}
		getenv := func(k string) string {
			if v := s.Environment[k]; v != nil {
				return *v
			}
			return ""
		}
		cfg, err := server.ParseConfig(nil, getenv)
		if err != nil {
			t.Errorf("%s: the service refuses its environment: %v", name, err)
		} else if cfg.RedisAddr != "" || !slices.Equal(cfg.RedisCluster, addrs) {
			t.Errorf("%s: configured with Redis %q and cluster %v, want the cluster alone", name, cfg.RedisAddr, cfg.RedisCluster)
		}
		checkDependsOn(t, s, "redis-cluster-init", types.ServiceConditionCompletedSuccessfully)
		checkDependsOn(t, s, "mongo", types.ServiceConditionHealthy)
		checkDependsOn(t, s, "etcd", types.ServiceConditionHealthy)
		if _, ok := s.DependsOn["redis"]; ok {
			t.Errorf("%s: depends on the single redis, which it does not use", name)
		}
	}

	lt := service(t, p, "loadtest-rc")
	if got := env(t, lt, "LOADTEST_REPLICAS"); got != "http://stock-a-rc:8080,http://stock-b-rc:8080" {
		t.Errorf("loadtest-rc: LOADTEST_REPLICAS = %q, want both stock-*-rc replicas", got)
	}
	for _, r := range []string{"stock-a-rc", "stock-b-rc"} {
		checkDependsOn(t, lt, r, types.ServiceConditionHealthy)
	}
}

func TestComposeLoadtest(t *testing.T) {
	all := loadCompose(t, "*")
	for _, sc := range scenarios {
		t.Run(sc.loadtest, func(t *testing.T) {
			s := service(t, all, sc.loadtest)
			if !slices.Equal(s.Profiles, []string{sc.ltProfile}) {
				t.Errorf("profiles %v, want [%s]", s.Profiles, sc.ltProfile)
			}
			if s.Build == nil || s.Build.Target != "loadtest" {
				t.Errorf("build %+v: want target loadtest of %s", s.Build, dockerfile)
			} else {
				checkDockerfileTarget(t, s)
			}
			for _, r := range sc.replicas {
				checkDependsOn(t, s, r, types.ServiceConditionHealthy)
			}

			// The replicas, by service name and container port: the harness's
			// --replicas flag or its env fallback LOADTEST_REPLICAS.
			cmd := []string(s.Command)
			replicas := ""
			if i := slices.Index(cmd, "--replicas"); i >= 0 && i+1 < len(cmd) {
				replicas = cmd[i+1]
			} else {
				replicas = env(t, s, "LOADTEST_REPLICAS")
			}
			var hosts []string
			for _, raw := range strings.Split(replicas, ",") {
				u, err := url.Parse(raw)
				if err != nil || u.Scheme != "http" || u.Port() != stockPort {
					t.Errorf("replica %q: want http://<service>:%s", raw, stockPort)
					continue
				}
				hosts = append(hosts, u.Hostname())
			}
			if !slices.Equal(hosts, sc.replicas) {
				t.Errorf("replicas %v, want %v", hosts, sc.replicas)
			}

			// The reports land in a volume, so they outlive the container:
			// --out, else the harness's default reports/<timestamp> under
			// the working directory.
			out := path.Join(s.WorkingDir, "reports")
			if i := slices.Index(cmd, "--out"); i >= 0 && i+1 < len(cmd) {
				out = path.Join(s.WorkingDir, cmd[i+1])
			} else if s.WorkingDir == "" {
				t.Errorf("no --out and no working_dir: the reports' place depends on the image")
			}
			if !slices.ContainsFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool {
				return out == v.Target || strings.HasPrefix(out, v.Target+"/")
			}) {
				t.Errorf("reports go to %s, which is not inside a mounted volume (%+v)", out, s.Volumes)
			}
		})
	}
}

// checkEtcdService checks the etcd service: the official image at the
// release of the embedded server in go.mod (so compose runs the etcd the
// tests and the benchmarks measured), one member that the replicas can
// reach at the URL it advertises, compaction on, and its data in a volume.
func checkEtcdService(t *testing.T, p *types.Project) {
	t.Helper()
	s := service(t, p, "etcd")
	gomod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*go\.etcd\.io/etcd/server/v3 (v\d+\.\d+\.\d+)`).FindSubmatch(gomod)
	if m == nil {
		t.Fatal("go.mod does not require go.etcd.io/etcd/server/v3")
	}
	if want := "gcr.io/etcd-development/etcd:" + string(m[1]); s.Image != want && s.Image != "quay.io/coreos/etcd:"+string(m[1]) {
		t.Errorf("etcd image %q: want the official image of the embedded server's release, %s", s.Image, want)
	}
	cmd := []string(s.Command)
	if len(cmd) == 0 || path.Base(cmd[0]) != "etcd" {
		t.Fatalf("etcd: command %q does not run etcd", cmd)
	}
	flags := map[string]string{}
	for _, a := range cmd[1:] {
		k, v, _ := strings.Cut(a, "=")
		flags[k] = v
	}
	if l := flags["--listen-client-urls"]; !strings.Contains(l, "0.0.0.0:2379") {
		t.Errorf("etcd: --listen-client-urls %q does not listen on every interface, port 2379", l)
	}
	if u, err := url.Parse(flags["--advertise-client-urls"]); err != nil || u.Host != "etcd:2379" {
		t.Errorf("etcd: --advertise-client-urls %q: want http://etcd:2379, the address the replicas dial", flags["--advertise-client-urls"])
	}
	if flags["--auto-compaction-retention"] == "" {
		t.Errorf("etcd: no --auto-compaction-retention: a long load run fills the backend quota")
	}
	if ic := flags["--initial-cluster"]; strings.Count(ic, "=") > 1 {
		t.Errorf("etcd: --initial-cluster %q: compose runs a single member", ic)
	}
	dir := flags["--data-dir"]
	if !slices.ContainsFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool {
		return v.Type == types.VolumeTypeVolume && v.Target == dir
	}) {
		t.Errorf("etcd: data dir %q is not in a named volume (%+v): a new container would restart the revisions, the fencing tokens", dir, s.Volumes)
	}
}

func profileList(p string) []string {
	if p == "" {
		return nil
	}
	return []string{p}
}

func checkStockBuild(t *testing.T, s types.ServiceConfig) {
	t.Helper()
	if s.Build == nil {
		t.Fatalf("%s: no build section; replicas are built from %s", s.Name, dockerfile)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Clean(s.Build.Context) != wd {
		t.Errorf("%s: build context %q, want the repository root %q", s.Name, s.Build.Context, wd)
	}
	if s.Build.Target != "stock" {
		t.Errorf("%s: build target %q, want stock", s.Name, s.Build.Target)
	}
	checkDockerfileTarget(t, s)
}

func checkDockerfileTarget(t *testing.T, s types.ServiceConfig) {
	t.Helper()
	df := s.Build.Dockerfile
	if !filepath.IsAbs(df) {
		df = filepath.Join(s.Build.Context, df)
	}
	wd, _ := os.Getwd()
	if rel, _ := filepath.Rel(wd, df); rel != dockerfile {
		t.Errorf("%s: builds from %s, want %s", s.Name, rel, dockerfile)
	}
	d := parseDockerfile(t)
	if !slices.ContainsFunc(d.stages, func(st stage) bool { return st.name == s.Build.Target }) {
		t.Errorf("%s: build target %q is not a stage of %s", s.Name, s.Build.Target, dockerfile)
	}
}

func checkNotRoot(t *testing.T, s types.ServiceConfig) {
	t.Helper()
	if s.User == "root" || s.User == "0" || strings.HasPrefix(s.User, "0:") || strings.HasPrefix(s.User, "root:") {
		t.Errorf("%s: runs as %q; the image's non-root user is enough", s.Name, s.User)
	}
	if s.Privileged {
		t.Errorf("%s: privileged", s.Name)
	}
}

func checkHealthcheck(t *testing.T, s types.ServiceConfig) []string {
	t.Helper()
	hc := s.HealthCheck
	if hc == nil || hc.Disable || len(hc.Test) < 2 {
		t.Fatalf("%s: no healthcheck", s.Name)
	}
	if hc.Test[0] != "CMD" && hc.Test[0] != "CMD-SHELL" {
		t.Fatalf("%s: healthcheck %q", s.Name, hc.Test)
	}
	if hc.Interval == nil || hc.Retries == nil || *hc.Retries == 0 {
		t.Errorf("%s: healthcheck needs an interval and retries", s.Name)
	}
	return hc.Test
}

func checkDependsOn(t *testing.T, s types.ServiceConfig, dep, condition string) {
	t.Helper()
	d, ok := s.DependsOn[dep]
	if !ok {
		t.Errorf("%s: does not depend on %s", s.Name, dep)
		return
	}
	if d.Condition != condition {
		t.Errorf("%s: depends on %s with condition %q, want %q", s.Name, dep, d.Condition, condition)
	}
}

// checkServiceAddr checks that host:port names a service of the project on
// the port its server listens on.
func checkServiceAddr(t *testing.T, p *types.Project, from, what, addr, wantPort string) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Errorf("%s: %s %q: %v", from, what, addr, err)
		return
	}
	if port != wantPort {
		t.Errorf("%s: %s port %s, want %s", from, what, port, wantPort)
	}
	if _, err := p.GetService(host); err != nil {
		t.Errorf("%s: %s names %q, which is not a service of %s", from, what, host, composeFile)
	}
}

// --- the Dockerfile -----------------------------------------------------------

type stage struct {
	from, name string
	user       string
	runs       []string          // RUN instructions, continuation lines joined
	heredocs   map[string]string // COPY <<EOF target -> content
}

type parsedDockerfile struct{ stages []stage }

var (
	fromRE    = regexp.MustCompile(`(?i)^FROM\s+(\S+)(?:\s+AS\s+(\S+))?$`)
	heredocRE = regexp.MustCompile(`^COPY\s+<<-?['"]?(\w+)['"]?\s+(\S+)$`)
)

// parseDockerfile reads the handful of Dockerfile constructs this repository
// uses: FROM ... AS, USER, RUN with continuation lines, and COPY heredocs.
func parseDockerfile(t *testing.T) parsedDockerfile {
	t.Helper()
	f, err := os.Open(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var d parsedDockerfile
	cur := func() *stage {
		if len(d.stages) == 0 {
			t.Fatalf("%s: instruction before the first FROM", dockerfile)
		}
		return &d.stages[len(d.stages)-1]
	}
	sc := bufio.NewScanner(f)
	var logical string
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && logical == "") {
			continue
		}
		if rest, ok := strings.CutSuffix(line, `\`); ok {
			logical += rest + " "
			continue
		}
		instr := logical + line
		logical = ""
		switch {
		case fromRE.MatchString(instr):
			m := fromRE.FindStringSubmatch(instr)
			d.stages = append(d.stages, stage{from: m[1], name: m[2], heredocs: map[string]string{}})
		case strings.HasPrefix(instr, "USER "):
			cur().user = strings.TrimSpace(strings.TrimPrefix(instr, "USER "))
		case strings.HasPrefix(instr, "RUN "):
			cur().runs = append(cur().runs, strings.TrimPrefix(instr, "RUN "))
		case heredocRE.MatchString(instr):
			m := heredocRE.FindStringSubmatch(instr)
			var body strings.Builder
			for sc.Scan() && sc.Text() != m[1] {
				body.WriteString(sc.Text() + "\n")
			}
			cur().heredocs[m[2]] = body.String()
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return d
}

func (d parsedDockerfile) stage(t *testing.T, name string) stage {
	t.Helper()
	for _, s := range d.stages {
		if s.name == name {
			return s
		}
	}
	t.Fatalf("%s: no stage %q", dockerfile, name)
	return stage{}
}

func TestDockerfileFinalImage(t *testing.T) {
	d := parseDockerfile(t)
	last := d.stages[len(d.stages)-1]
	if last.name != "stock" {
		t.Errorf("the last stage (what a plain `docker build` builds) is %q, want stock", last.name)
	}
	st := d.stage(t, "stock")
	if !strings.HasPrefix(st.from, "gcr.io/distroless/static") && st.from != "scratch" {
		t.Errorf("stock stage is FROM %s; want a static distroless or scratch base", st.from)
	}
	for _, name := range []string{"stock", "loadtest"} {
		st := d.stage(t, name)
		if u := strings.SplitN(st.user, ":", 2)[0]; u == "" || u == "root" || u == "0" {
			t.Errorf("%s stage runs as %q; want an explicit non-root USER", name, st.user)
		}
	}
	if !strings.HasPrefix(d.stages[0].from, "golang:") {
		t.Errorf("first stage is FROM %s, want the golang image", d.stages[0].from)
	}
}

// goBuild is one `go build` command of a RUN instruction.
type goBuild struct {
	stage string
	dir   string   // `cd DIR &&` before it, else the WORKDIR (the context root)
	env   []string // VAR=value words before `go`
	args  []string // after `go build`
}

func dockerfileBuilds(t *testing.T, d parsedDockerfile) []goBuild {
	t.Helper()
	var builds []goBuild
	for _, st := range d.stages {
		for _, run := range st.runs {
			words := shellWords(t, run)
			for len(words) > 0 && strings.HasPrefix(words[0], "--mount=") {
				words = words[1:]
			}
			dir := ""
			for cmd := range splitWords(words, "&&") {
				if len(cmd) == 2 && cmd[0] == "cd" {
					dir = cmd[1]
					continue
				}
				b := goBuild{stage: st.name, dir: dir}
				for len(cmd) > 0 && strings.Contains(cmd[0], "=") {
					b.env, cmd = append(b.env, cmd[0]), cmd[1:]
				}
				if len(cmd) >= 2 && cmd[0] == "go" && cmd[1] == "build" {
					b.args = cmd[2:]
					builds = append(builds, b)
				}
			}
		}
	}
	return builds
}

func splitWords(words []string, sep string) func(func([]string) bool) {
	return func(yield func([]string) bool) {
		for {
			i := slices.Index(words, sep)
			if i < 0 {
				yield(words)
				return
			}
			if !yield(words[:i]) {
				return
			}
			words = words[i+1:]
		}
	}
}

// shellWords splits a command line the way sh does for the quoting this
// Dockerfile uses: double and single quotes, no expansions.
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				w.WriteRune(r)
			}
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		t.Fatalf("unterminated quote in %q", s)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

// TestDockerfileBuilds runs each `go build` of the Dockerfile as written, on
// this checkout, with the output redirected to a temporary directory, so a
// change that breaks the image build fails `go test` here, not only in a
// Docker build somewhere else.
// Under .ci/run the packages are already in the build cache (see
// TestCIRunSharesDockerfileBuilds), and each build only links.
func TestDockerfileBuilds(t *testing.T) {
	d := parseDockerfile(t)
	builds := dockerfileBuilds(t, d)
	var outputs []string
	for _, b := range builds {
		if !slices.Contains(b.env, "CGO_ENABLED=0") {
			t.Errorf("stage %s: go build %q without CGO_ENABLED=0 cannot run on a static base image", b.stage, b.args)
		}
		i := slices.Index(b.args, "-o")
		if i < 0 || i+1 >= len(b.args) {
			t.Fatalf("stage %s: go build %q has no -o", b.stage, b.args)
		}
		outputs = append(outputs, b.args[i+1])
	}
	for _, want := range []string{"/out/stock", "/out/probe", "/out/loadtest"} {
		if !slices.Contains(outputs, want) {
			t.Errorf("%s builds %v; want one of them to be %s", dockerfile, outputs, want)
		}
	}
	testskip.Long(t, "runs the Dockerfile's go builds")
	if t.Failed() {
		t.FailNow()
	}

	tmp := t.TempDir()
	// Heredoc files land where the Dockerfile puts them, under tmp.
	for _, st := range d.stages {
		for target, body := range st.heredocs {
			p := filepath.Join(tmp, filepath.FromSlash(target))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, b := range builds {
		args := slices.Clone(b.args)
		i := slices.Index(args, "-o")
		out := filepath.Join(tmp, filepath.FromSlash(args[i+1]))
		args[i+1] = out
		dir := "." // WORKDIR /src holds the build context, the repository root
		if b.dir != "" {
			dir = filepath.Join(tmp, filepath.FromSlash(b.dir))
		}
		t.Run(filepath.Base(out), func(t *testing.T) {
			start := time.Now()
			cmd := exec.Command("go", append([]string{"build"}, args...)...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), b.env...)
			if outb, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("stage %s: %s (in %s): %v\n%s", b.stage, cmd, b.dir, err, outb)
			}
			t.Logf("stage %s: go build %s: %v", b.stage, strings.Join(b.args, " "), time.Since(start).Round(time.Millisecond))
			checkStatic(t, out)
			if filepath.Base(out) == "probe" {
				checkProbe(t, out)
			}
		})
	}
}

// ciRun is the CI entry point, which runs the Dockerfile's go builds of
// this repository's packages before scripts/test.sh.
const ciRun = ".ci/run"

// TestCIRunSharesDockerfileBuilds: .ci/run runs every `go build` of the
// Dockerfile that builds a package of this repository, with the same
// environment and flags (only the output path differs). That keeps the
// image build checked where there is no Docker engine, and it is what
// makes TestDockerfileBuilds cheap under .ci/run: the build cache then
// holds every package those commands compile, in their build mode
// (CGO_ENABLED=0, -trimpath), which no other step of the tests uses, and
// the test only links.
func TestCIRunSharesDockerfileBuilds(t *testing.T) {
	raw, err := os.ReadFile(ciRun)
	if err != nil {
		t.Fatal(err)
	}
	script := string(raw)
	begin, end := strings.Index(script, "# BEGIN dockerfile builds\n"), strings.Index(script, "# END dockerfile builds")
	if begin < 0 || end < begin {
		t.Fatalf("%s has no \"# BEGIN dockerfile builds\" ... \"# END dockerfile builds\" block", ciRun)
	}
	var ci []goBuild
	for line := range strings.Lines(script[begin:end]) {
		words := shellWords(t, strings.TrimSpace(line))
		var b goBuild
		for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
			b.env, words = append(b.env, words[0]), words[1:]
		}
		if len(words) >= 2 && words[0] == "go" && words[1] == "build" {
			b.args = words[2:]
			ci = append(ci, b)
		}
	}
	// Compare everything but the -o value's directory.
	key := func(b goBuild) string {
		args := slices.Clone(b.args)
		if i := slices.Index(args, "-o"); i >= 0 && i+1 < len(args) {
			args[i+1] = path.Base(args[i+1])
		}
		return strings.Join(b.env, " ") + " go build " + strings.Join(args, " ")
	}
	var have []string
	for _, b := range ci {
		have = append(have, key(b))
	}
	for _, b := range dockerfileBuilds(t, parseDockerfile(t)) {
		if b.dir != "" || !slices.ContainsFunc(b.args, func(a string) bool { return strings.HasPrefix(a, "./") }) {
			continue // not a package of this repository (the probe's heredoc)
		}
		if !slices.Contains(have, key(b)) {
			t.Errorf("%s does not run the Dockerfile's %q (stage %s); it runs %q", ciRun, key(b), b.stage, have)
		}
	}
}

// TestDockerignoreKeepsBuildInputs checks that .dockerignore leaves in the
// build context every file the image's `go build` commands read: go.mod,
// go.sum, and the Go, assembly and embedded files of this module's packages
// that services/stock and loadtest import.
func TestDockerignoreKeepsBuildInputs(t *testing.T) {
	f, err := os.Open(".dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	patterns, err := ignorefile.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatalf(".dockerignore: %v", err)
	}
	cmd := exec.Command("go", "list", "-deps",
		"-f", `{{if .Module}}{{if .Module.Main}}{{.Dir}}|{{join .GoFiles ","}},{{join .SFiles ","}},{{join .EmbedFiles ","}}{{end}}{{end}}`,
		"./services/stock", "./loadtest")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	need := []string{"go.mod", "go.sum"}
	for line := range strings.Lines(string(out)) {
		dir, files, ok := strings.Cut(strings.TrimSpace(line), "|")
		if !ok {
			continue
		}
		rel, err := filepath.Rel(wd, dir)
		if err != nil {
			t.Fatal(err)
		}
		for name := range strings.SplitSeq(files, ",") {
			if name != "" {
				need = append(need, filepath.ToSlash(filepath.Join(rel, name)))
			}
		}
	}
	if len(need) < 10 {
		t.Fatalf("go list found only %v", need)
	}
	for _, p := range need {
		if ignored, err := pm.MatchesOrParentMatches(p); err != nil || ignored {
			t.Errorf(".dockerignore leaves %s out of the build context (err %v)", p, err)
		}
	}
	for _, p := range []string{".git/HEAD", "docs/README.md", "reports/x/results.json", "compose_test.go"} {
		if ignored, _ := pm.MatchesOrParentMatches(p); !ignored {
			t.Errorf(".dockerignore sends %s to the build context", p)
		}
	}
}

// checkStatic fails unless the binary needs no dynamic loader: the final
// images have no libc.
func checkStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Skipf("%s is not ELF on this platform: %v", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked", path)
		}
	}
}

// checkProbe runs the image's health-check client against a local server:
// 0 on 200, non-zero on anything else or no server.
func checkProbe(t *testing.T, probe string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	for _, tc := range []struct {
		url  string
		want bool
	}{
		{srv.URL + "/readyz", true},
		{srv.URL + "/healthz", false},
		{closed.URL + "/readyz", false},
		{"not-a-url", false},
	} {
		out, err := exec.Command(probe, tc.url).CombinedOutput()
		if got := err == nil; got != tc.want {
			t.Errorf("probe %s: healthy=%v, want %v (%v: %s)", tc.url, got, tc.want, err, out)
		}
	}
}

// --- the CI workflow ----------------------------------------------------------

func TestWorkflow(t *testing.T) {
	raw, err := os.ReadFile(workflow)
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		Jobs map[string]struct {
			Services map[string]struct {
				Image string `yaml:"image"`
			} `yaml:"services"`
			Env   map[string]string `yaml:"env"`
			Steps []struct {
				Run  string            `yaml:"run"`
				Uses string            `yaml:"uses"`
				With map[string]string `yaml:"with"`
			} `yaml:"steps"`
		} `yaml:"jobs"`
	}
	if err := yaml.Unmarshal(raw, &wf); err != nil {
		t.Fatalf("%s: %v", workflow, err)
	}
	p := loadCompose(t)
	images := map[string]string{}
	runs := ""
	goVersion := ""
	envs := map[string]string{}
	for _, j := range wf.Jobs {
		for name, s := range j.Services {
			images[name] = s.Image
		}
		for k, v := range j.Env {
			envs[k] = v
		}
		for _, s := range j.Steps {
			runs += s.Run + "\n"
			if strings.HasPrefix(s.Uses, "actions/setup-go@") {
				goVersion = s.With["go-version"]
			}
		}
	}
	// The same servers as compose.yaml, so CI tests what users run.
	for _, name := range []string{"mongo", "redis"} {
		if got, want := images[name], service(t, p, name).Image; got != want {
			t.Errorf("%s: service %s runs %q, compose.yaml runs %q", workflow, name, got, want)
		}
	}
	if envs["MONGO_URI"] == "" || envs["REDIS_ADDR"] == "" {
		t.Errorf("%s: MONGO_URI and REDIS_ADDR must point the tests at the service containers (env %v)", workflow, envs)
	}
	if !strings.Contains(runs, "scripts/test.sh") {
		t.Errorf("%s does not run scripts/test.sh, the README's test command", workflow)
	}
	if !strings.Contains(runs, "docker build") || !strings.Contains(runs, dockerfile) {
		t.Errorf("%s does not build %s", workflow, dockerfile)
	}
	gomod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if m == nil || !strings.HasPrefix(goVersion, string(m[1])) {
		t.Errorf("%s: setup-go go-version %q; go.mod says go %s", workflow, goVersion, m[1])
	}
}

// TestComposeLive: `docker compose up` (no profile) also serves the live
// page, on loopback, against both replicas once they are healthy, with the
// admin token the harness needs for its stock resets, and its reports in the
// reports volume.
func TestComposeLive(t *testing.T) {
	p := loadCompose(t)
	s := service(t, p, "live")
	if len(s.Profiles) != 0 {
		t.Errorf("profiles %v: the live page must start with a plain docker compose up", s.Profiles)
	}
	if s.Build == nil || s.Build.Target != "loadtest" {
		t.Errorf("build %+v: want the loadtest target", s.Build)
	} else {
		checkDockerfileTarget(t, s)
	}
	cmd := []string(s.Command)
	if len(cmd) == 0 || cmd[0] != "serve" {
		t.Errorf("command %q does not serve the page", cmd)
	}
	i := slices.Index(cmd, "--serve-addr")
	if i < 0 || i+1 >= len(cmd) || !strings.HasPrefix(cmd[i+1], "0.0.0.0:") {
		t.Errorf("command %q: the page must listen on all the container's interfaces", cmd)
	}
	if got := env(t, s, "LOADTEST_REPLICAS"); got != "http://stock-a:"+stockPort+",http://stock-b:"+stockPort {
		t.Errorf("LOADTEST_REPLICAS %q, want both replicas", got)
	}
	if env(t, s, "LOADTEST_ADMIN_TOKEN") == "" || !strings.HasPrefix(env(t, s, "LOADTEST_OUT"), "/reports") {
		t.Errorf("admin token or output directory missing: %v", s.Environment)
	}
	for _, r := range []string{"stock-a", "stock-b"} {
		checkDependsOn(t, s, r, types.ServiceConditionHealthy)
	}
	if len(s.Ports) != 1 || s.Ports[0].HostIP != "127.0.0.1" || s.Ports[0].Target != 8090 {
		t.Errorf("ports %+v: want the page published on loopback", s.Ports)
	}
}
