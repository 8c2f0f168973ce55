package server_test

import (
	"errors"
	"flag"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stocklock/stocklock/services/stock/server"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParseConfig(t *testing.T) {
	required := map[string]string{"MONGO_URI": "mongodb://db:27017/", "REDIS_ADDR": "cache:6379"}

	c, err := server.ParseConfig(nil, env(required))
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if c.Addr != ":8080" || c.DB != "stocklock" || c.Strategy != "mongo-lease" || !c.Fencing || c.WriteConcern != "majority" || c.RMWDelay != 0 ||
		c.LockSkew != 500*time.Millisecond || c.ClockOffset != 0 || c.WriteStall != 0 ||
		c.SalesLimit != 12 || c.SalesQueue != 50 || c.SalesQueueWait != 500*time.Millisecond || c.MongoPool != 100 || c.ControlPool != 8 {
		t.Errorf("defaults: %+v", c)
	}
	// The queued stream's defaults are production's: files, one server
	// unless the URL names a cluster, de-duplication for two minutes.
	if q := c.QueuedOptions(); q.Memory || q.Replicas != 1 || q.Dedup != 2*time.Minute || q.NoDedup || q.ApplyDelay != 0 {
		t.Errorf("queued defaults: %+v", q)
	}
	c.NATSURL = "nats://n1:4222,nats://n2:4222,nats://n3:4222"
	if q := c.QueuedOptions(); q.Replicas != 3 {
		t.Errorf("queued on a cluster URL of three servers: %+v; want R3", q)
	}

	vars := map[string]string{
		"MONGO_URI": "mongodb://db:27017/", "REDIS_ADDR": "cache:6379", "STOCK_ADDR": "127.0.0.1:9000",
		"MONGO_DB": "shop", "REPLICA_ID": "r-1", "LOCK_TTL": "3s", "LOCK_WAIT": "500ms", "STRATEGY": "atomic",
		"RMW_DELAY": "5ms", "WRITE_CONCERN": "1", "MAX_QTY": "7", "FENCING": "false", "CAS_ATTEMPTS": "3", "BUCKETS": "4",
		"REQUEST_TIMEOUT": "4s", "SHUTDOWN_TIMEOUT": "2s", "LOG_FORMAT": "text", "LOG_LEVEL": "debug",
		"ETCD_ENDPOINTS": "http://etcd-1:2379, http://etcd-2:2379,,etcd-3:2379",
		"REDLOCK_ADDRS":  "r1:6379, r2:6379,r3:6379",
		"LOCK_SKEW":      "1s", "CLOCK_OFFSET": "-2s", "WRITE_STALL": "20ms",
		"RECOVERY_INTERVAL": "3s", "RECOVERY_GRACE": "1s", "IDEMPOTENCY_RETENTION": "48h", "HEARTBEAT_TIMEOUT": "2s",
		"DEMO": "true", "ADMIN_TOKEN": "0123456789abcdef0123", "INTERNAL_ADDR": ":9090",
		"REDIS_STOCK_ACK": "redis", "REDIS_STOCK_FLUSH": "1s", "REDIS_STOCK_WAIT": "250ms",
		"SALES_CONCURRENCY": "20", "SALES_QUEUE": "0", "SALES_QUEUE_WAIT": "1s", "MONGO_POOL": "40", "CONTROL_POOL": "3",
		"QUEUED_STORAGE": "memory", "QUEUED_REPLICAS": "3", "QUEUED_DEDUP": "0s", "QUEUED_APPLY_DELAY": "250ms",
	}
	c, err = server.ParseConfig(nil, env(vars))
	if err != nil {
		t.Fatalf("from the environment: %v", err)
	}
	want := server.Config{
		Addr: "127.0.0.1:9000", MongoURI: "mongodb://db:27017/", DB: "shop", RedisAddr: "cache:6379", Replica: "r-1",
		LockTTL: 3 * time.Second, LockWait: 500 * time.Millisecond, Strategy: "atomic", RMWDelay: 5 * time.Millisecond,
		WriteConcern: "1", MaxQty: 7, Fencing: false, CASAttempts: 3, Buckets: 4, RequestTimeout: 4 * time.Second,
		ShutdownTimeout: 2 * time.Second, LogFormat: "text", LogLevel: "debug",
		EtcdEndpoints: []string{"http://etcd-1:2379", "http://etcd-2:2379", "etcd-3:2379"},
		RedlockAddrs:  []string{"r1:6379", "r2:6379", "r3:6379"},
		LockSkew:      time.Second, ClockOffset: -2 * time.Second, WriteStall: 20 * time.Millisecond,
		RecoveryEvery: 3 * time.Second, RecoveryGrace: time.Second, KeyRetention: 48 * time.Hour, DeadAfter: 2 * time.Second,
		Demo: true, AdminToken: "0123456789abcdef0123", InternalAddr: ":9090",
		RedisStockAck: server.RedisStockAckRedis, RedisStockFlush: time.Second, RedisStockWait: 250 * time.Millisecond,
		SalesLimit: 20, SalesQueue: 0, SalesQueueWait: time.Second, MongoPool: 40, ControlPool: 3,
		QueuedStorage: server.QueuedStorageMemory, QueuedReplicas: 3, QueuedDedup: 0, QueuedDelay: 250 * time.Millisecond,
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("from the environment:\n got %+v\nwant %+v", c, want)
	}

	// A flag beats its variable.
	c, err = server.ParseConfig([]string{"--strategy=optimistic", "--fencing", "--max-qty", "9"}, env(vars))
	if err != nil || c.Strategy != "optimistic" || !c.Fencing || c.MaxQty != 9 || c.DB != "shop" {
		t.Errorf("flags over the environment: %+v, %v", c, err)
	}

	// The etcd endpoints flag replaces the variable's list, and etcd-lock
	// may be the default strategy once there is an etcd.
	c, err = server.ParseConfig([]string{"--etcd-endpoints=https://e:2379", "--strategy=etcd-lock"}, env(vars))
	if err != nil || !reflect.DeepEqual(c.EtcdEndpoints, []string{"https://e:2379"}) || c.Strategy != "etcd-lock" {
		t.Errorf("--etcd-endpoints over ETCD_ENDPOINTS: %+v, %v", c, err)
	}
	// The redlock servers' flag replaces the variable's list, and redlock
	// may be the default strategy once there are servers.
	five := "--redlock-addrs=a:1,b:2,c:3,d:4,e:5"
	c, err = server.ParseConfig([]string{five, "--strategy=redlock"}, env(vars))
	if err != nil || len(c.RedlockAddrs) != 5 || c.RedlockAddrs[4] != "e:5" || c.Strategy != "redlock" {
		t.Errorf("--redlock-addrs over REDLOCK_ADDRS: %+v, %v", c, err)
	}
	// A Redis Cluster instead of one Redis.
	c, err = server.ParseConfig(nil, env(map[string]string{"MONGO_URI": "mongodb://db/", "REDIS_CLUSTER_ADDRS": "n1:7000, n2:7001"}))
	if err != nil || c.RedisAddr != "" || !reflect.DeepEqual(c.RedisCluster, []string{"n1:7000", "n2:7001"}) {
		t.Errorf("REDIS_CLUSTER_ADDRS: %+v, %v", c, err)
	}
	// Without etcd the replica still starts: etcd-lock is optional.
	c, err = server.ParseConfig(nil, env(required))
	if err != nil || len(c.EtcdEndpoints) != 0 {
		t.Errorf("no ETCD_ENDPOINTS: %+v, %v", c, err)
	}
}

// etcd leases are whole seconds, so etcd-lock rounds the lock TTL up: a
// lease shorter than asked would expire under a holder that trusts it.
func TestEtcdLockTTL(t *testing.T) {
	for in, want := range map[time.Duration]time.Duration{
		50 * time.Millisecond:   time.Second,
		time.Second:             time.Second,
		1001 * time.Millisecond: 2 * time.Second,
		2500 * time.Millisecond: 3 * time.Second,
		10 * time.Second:        10 * time.Second,
	} {
		if got := server.EtcdLockTTL(in); got != want {
			t.Errorf("EtcdLockTTL(%v) = %v, want %v", in, got, want)
		}
	}
}

func TestParseConfigErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want []string // every one must appear in the message
	}{
		{"nothing set", nil, nil, []string{"--mongo-uri / MONGO_URI: not set", "--redis-addr / REDIS_ADDR: not set"}},
		{"bad values", []string{"--mongo-uri=http://db", "--redis-addr=cache", "--strategy=yolo", "--max-qty=0", "--lock-ttl=1ms", "--write-concern=0", "--db=a.b", "--replica=a b", "--log-format=xml"}, nil,
			[]string{"must start with mongodb://", `"cache" is not host:port`, `"yolo" is not one of`, "MAX_QTY: 0", "LOCK_TTL: 1ms is under", `WRITE_CONCERN: "0"`, `MONGO_DB: "a.b"`, `REPLICA_ID: "a b"`, `LOG_FORMAT: "xml"`}},
		{"bad environment", nil, map[string]string{"MONGO_URI": "mongodb://db/", "REDIS_ADDR": "c:1", "LOCK_WAIT": "soon", "FENCING": "maybe", "MAX_QTY": "lots"},
			[]string{`LOCK_WAIT="soon": not a duration`, `FENCING="maybe": want true or false`, `MAX_QTY="lots": not a whole number`}},
		{"buckets out of range", []string{"--buckets=0"}, map[string]string{"MONGO_URI": "mongodb://db/", "REDIS_ADDR": "c:1", "BUCKETS": "65"},
			[]string{"--buckets / BUCKETS: 0: want 1 to 64"}},
		{"lock wait longer than the request", []string{"--lock-wait=20s"}, map[string]string{"MONGO_URI": "mongodb://db/", "REDIS_ADDR": "c:1"},
			[]string{"must be longer than the lock wait"}},
		{"etcd-lock without etcd", []string{"--strategy=etcd-lock"}, map[string]string{"MONGO_URI": "mongodb://db/", "REDIS_ADDR": "c:1"},
			[]string{"--strategy / STRATEGY: etcd-lock needs its etcd lock service: set --etcd-endpoints / ETCD_ENDPOINTS"}},
		{"bad etcd endpoints", []string{"--etcd-endpoints=mongodb://e:2379,http://e,e:2379/x,http://e:2379/v3"}, map[string]string{"MONGO_URI": "mongodb://db/", "REDIS_ADDR": "c:1"},
			[]string{`ETCD_ENDPOINTS: "mongodb://e:2379": scheme "mongodb"`, `ETCD_ENDPOINTS: "http://e": want a client URL with host and port`,
				`ETCD_ENDPOINTS: "e:2379/x": want a client URL`, `ETCD_ENDPOINTS: "http://e:2379/v3": a client URL has no path`}},
		{"fault drill knobs out of range", []string{"--clock-offset=2h", "--lock-skew=-1s", "--write-stall=-5ms"}, map[string]string{"MONGO_URI": "mongodb://db/", "REDIS_ADDR": "c:1"},
			[]string{"--clock-offset / CLOCK_OFFSET: 2h0m0s: want between -1h and 1h", "--lock-skew / LOCK_SKEW: -1s: want 0 up to 1h", "--write-stall / WRITE_STALL: -5ms"}},
		{"recovery and key retention out of range", []string{"--recovery-interval=0s", "--recovery-grace=-1s", "--idempotency-retention=1h", "--heartbeat-timeout=100ms"}, map[string]string{"MONGO_URI": "mongodb://db/", "REDIS_ADDR": "c:1"},
			[]string{"--recovery-interval / RECOVERY_INTERVAL: 0s", "--recovery-grace / RECOVERY_GRACE: -1s", "--idempotency-retention / IDEMPOTENCY_RETENTION: 1h0m0s: keys must be kept at least 24h", "--heartbeat-timeout / HEARTBEAT_TIMEOUT: 100ms"}},
		{"a Redis and a Redis Cluster", []string{"--redis-cluster-addrs=n1:7000,n2:7001"}, map[string]string{"MONGO_URI": "mongodb://db/", "REDIS_ADDR": "c:1"},
			[]string{"--redis-cluster-addrs / REDIS_CLUSTER_ADDRS: set together with --redis-addr / REDIS_ADDR"}},
		{"bad cluster addresses", nil, map[string]string{"MONGO_URI": "mongodb://db/", "REDIS_CLUSTER_ADDRS": "n1:7000,n2"},
			[]string{`--redis-cluster-addrs / REDIS_CLUSTER_ADDRS: "n2" is not host:port`}},
		{"redlock without servers", []string{"--strategy=redlock"}, map[string]string{"MONGO_URI": "mongodb://db/", "REDIS_ADDR": "c:1"},
			[]string{"--strategy / STRATEGY: redlock needs its redlock lock service: set --redlock-addrs / REDLOCK_ADDRS"}},
		{"bad redlock servers", []string{"--redlock-addrs=a:1,b,a:1,c:99999"}, map[string]string{"MONGO_URI": "mongodb://db/", "REDIS_ADDR": "c:1"},
			[]string{`--redlock-addrs / REDLOCK_ADDRS: "b" is not host:port`, `REDLOCK_ADDRS: "a:1" is listed twice`, `REDLOCK_ADDRS: "c:99999" is not host:port`,
				"REDLOCK_ADDRS: 4 listed: give an odd number of at least 3"}},
		{"too few redlock servers", nil, map[string]string{"MONGO_URI": "mongodb://db/", "REDIS_ADDR": "c:1", "REDLOCK_ADDRS": "a:1"},
			[]string{"--redlock-addrs / REDLOCK_ADDRS: 1 listed: give an odd number of at least 3 independent redis-servers"}},
		{"redis-stock wait out of range", []string{"--redis-stock-wait=-1ms"}, map[string]string{"MONGO_URI": "mongodb://db/", "REDIS_ADDR": "c:1", "REDIS_STOCK_WAIT": "5s"},
			[]string{"--redis-stock-wait / REDIS_STOCK_WAIT: -1ms: want 0 (no WAIT, the default) up to 2s"}},
		{"redis-stock wait too long", nil, map[string]string{"MONGO_URI": "mongodb://db/", "REDIS_ADDR": "c:1", "REDIS_STOCK_WAIT": "5s"},
			[]string{"--redis-stock-wait / REDIS_STOCK_WAIT: 5s: want 0"}},
		{"sales admission out of range", []string{"--sales-concurrency=101", "--sales-queue=-1", "--sales-queue-wait=15s", "--control-pool=0"}, map[string]string{"MONGO_URI": "mongodb://db/", "REDIS_ADDR": "c:1"},
			[]string{"--sales-concurrency / SALES_CONCURRENCY: 101: want 1 up to --mongo-pool / MONGO_POOL (100)", "--sales-queue / SALES_QUEUE: -1", "--sales-queue-wait / SALES_QUEUE_WAIT: 15s", "--control-pool / CONTROL_POOL: 0"}},
		{"sales above a smaller pool", []string{"--mongo-pool=8"}, map[string]string{"MONGO_URI": "mongodb://db/", "REDIS_ADDR": "c:1"},
			[]string{"--sales-concurrency / SALES_CONCURRENCY: 12: want 1 up to --mongo-pool / MONGO_POOL (8)"}},
		{"queued stream out of range", []string{"--queued-storage=disk", "--queued-replicas=7", "--queued-dedup=10ms", "--queued-apply-delay=-1s", "--demo"}, map[string]string{"MONGO_URI": "mongodb://db/", "REDIS_ADDR": "c:1"},
			[]string{`--queued-storage / QUEUED_STORAGE: "disk": want "file" or "memory"`, "--queued-replicas / QUEUED_REPLICAS: 7: want 1 to 5", "--queued-dedup / QUEUED_DEDUP: 10ms: want 1s up to 1h", "--queued-apply-delay / QUEUED_APPLY_DELAY: -1s"}},
		{"unknown flag", []string{"--colour=blue"}, nil, []string{"flag provided but not defined", "--help"}},
		{"stray argument", []string{"serve"}, map[string]string{"MONGO_URI": "mongodb://db/", "REDIS_ADDR": "c:1"}, []string{"unexpected arguments"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := server.ParseConfig(tc.args, env(tc.env))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the message lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help"} {
		if _, err := server.ParseConfig([]string{arg}, env(nil)); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%s: %v, want flag.ErrHelp", arg, err)
		}
	}
	usage := server.Usage()
	for _, name := range []string{"addr", "mongo-uri", "db", "redis-addr", "replica", "lock-ttl", "lock-wait", "strategy",
		"rmw-delay", "write-concern", "max-qty", "fencing", "cas-attempts", "request-timeout", "shutdown-timeout", "log-format", "log-level", "etcd-endpoints", "redlock-addrs"} {
		if !strings.Contains(usage, "-"+name+" ") && !strings.Contains(usage, "-"+name+"\n") {
			t.Errorf("--help does not list --%s", name)
		}
	}
	for _, v := range []string{"STOCK_ADDR", "MONGO_URI", "MONGO_DB", "REDIS_ADDR", "REPLICA_ID", "LOCK_TTL", "LOCK_WAIT", "STRATEGY",
		"RMW_DELAY", "WRITE_CONCERN", "MAX_QTY", "FENCING", "SHUTDOWN_TIMEOUT", "ETCD_ENDPOINTS", "REDLOCK_ADDRS"} {
		if !strings.Contains(usage, "env "+v+")") {
			t.Errorf("--help does not name %s", v)
		}
	}
}

// TestSafeDefaults: the broken strategies and the drill settings need
// --demo, and every refusal names the flag to change.
func TestSafeDefaults(t *testing.T) {
	required := map[string]string{"MONGO_URI": "mongodb://db:27017/", "REDIS_ADDR": "cache:6379"}
	for _, args := range [][]string{
		{"--strategy=unsafe"}, {"--strategy=local"}, {"--rmw-delay=10ms"}, {"--write-stall=5ms"}, {"--clock-offset=1s"}, {"--fencing=false"}, {"--redis-stock-ack=redis"},
		{"--queued-dedup=0"}, {"--queued-apply-delay=1s"},
	} {
		_, err := server.ParseConfig(args, env(required))
		if err == nil || !strings.Contains(err.Error(), "--demo / DEMO=true") || !strings.Contains(err.Error(), strings.SplitN(args[0], "=", 2)[0]) {
			t.Errorf("%v without --demo: %v; want a refusal naming the flag and --demo", args, err)
		}
		if _, err := server.ParseConfig(append(args, "--demo"), env(required)); err != nil {
			t.Errorf("%v with --demo: %v", args, err)
		}
	}
	c, err := server.ParseConfig(nil, env(required))
	if err != nil || c.Demo || c.AdminToken != "" || c.InternalAddr != "" {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	for _, args := range [][]string{{"--admin-token=short"}, {"--admin-token=has a space in it, sadly"}, {"--internal-addr=9090"}} {
		if _, err := server.ParseConfig(args, env(required)); err == nil || !strings.Contains(err.Error(), strings.SplitN(args[0], "=", 2)[0]) {
			t.Errorf("%v: %v; want a refusal naming the flag", args, err)
		}
	}
}
