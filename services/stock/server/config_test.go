package server_test

import (
	"errors"
	"flag"
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
	if c.Addr != ":8080" || c.DB != "stocklock" || c.Strategy != "mongo-lease" || !c.Fencing || c.WriteConcern != "majority" || c.RMWDelay != 0 {
		t.Errorf("defaults: %+v", c)
	}

	vars := map[string]string{
		"MONGO_URI": "mongodb://db:27017/", "REDIS_ADDR": "cache:6379", "STOCK_ADDR": "127.0.0.1:9000",
		"MONGO_DB": "shop", "REPLICA_ID": "r-1", "LOCK_TTL": "3s", "LOCK_WAIT": "500ms", "STRATEGY": "atomic",
		"RMW_DELAY": "5ms", "WRITE_CONCERN": "1", "MAX_QTY": "7", "FENCING": "false", "CAS_ATTEMPTS": "3",
		"REQUEST_TIMEOUT": "4s", "SHUTDOWN_TIMEOUT": "2s", "LOG_FORMAT": "text", "LOG_LEVEL": "debug",
	}
	c, err = server.ParseConfig(nil, env(vars))
	if err != nil {
		t.Fatalf("from the environment: %v", err)
	}
	want := server.Config{
		Addr: "127.0.0.1:9000", MongoURI: "mongodb://db:27017/", DB: "shop", RedisAddr: "cache:6379", Replica: "r-1",
		LockTTL: 3 * time.Second, LockWait: 500 * time.Millisecond, Strategy: "atomic", RMWDelay: 5 * time.Millisecond,
		WriteConcern: "1", MaxQty: 7, Fencing: false, CASAttempts: 3, RequestTimeout: 4 * time.Second,
		ShutdownTimeout: 2 * time.Second, LogFormat: "text", LogLevel: "debug",
	}
	if c != want {
		t.Errorf("from the environment:\n got %+v\nwant %+v", c, want)
	}

	// A flag beats its variable.
	c, err = server.ParseConfig([]string{"--strategy=optimistic", "--fencing", "--max-qty", "9"}, env(vars))
	if err != nil || c.Strategy != "optimistic" || !c.Fencing || c.MaxQty != 9 || c.DB != "shop" {
		t.Errorf("flags over the environment: %+v, %v", c, err)
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
		{"lock wait longer than the request", []string{"--lock-wait=20s"}, map[string]string{"MONGO_URI": "mongodb://db/", "REDIS_ADDR": "c:1"},
			[]string{"must be longer than the lock wait"}},
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
		"rmw-delay", "write-concern", "max-qty", "fencing", "cas-attempts", "request-timeout", "shutdown-timeout", "log-format", "log-level"} {
		if !strings.Contains(usage, "-"+name+" ") && !strings.Contains(usage, "-"+name+"\n") {
			t.Errorf("--help does not list --%s", name)
		}
	}
	for _, v := range []string{"STOCK_ADDR", "MONGO_URI", "MONGO_DB", "REDIS_ADDR", "REPLICA_ID", "LOCK_TTL", "LOCK_WAIT", "STRATEGY",
		"RMW_DELAY", "WRITE_CONCERN", "MAX_QTY", "FENCING", "SHUTDOWN_TIMEOUT"} {
		if !strings.Contains(usage, "env "+v+")") {
			t.Errorf("--help does not name %s", v)
		}
	}
}
