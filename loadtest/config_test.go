package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stocklock/stocklock/loadtest/harness"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// testAdminToken is the admin token of the replicas the tests start
// in-process; env passes it to the harness as LOADTEST_ADMIN_TOKEN.
const testAdminToken = "loadtest-test-admin-token"

// env returns a getenv of kv's pairs, and the tests' admin token.
func envOf(kv ...string) func(string) string {
	m := map[string]string{"LOADTEST_ADMIN_TOKEN": testAdminToken}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestParseConfigDefaults(t *testing.T) {
	c, err := ParseConfig(nil, envOf(), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Replicas) != 0 || c.LocalReplicas != 2 {
		t.Errorf("default replicas %v, local replicas %d: want none, start two", c.Replicas, c.LocalReplicas)
	}
	if !slices.Equal(c.Strategies, strategy.Names()) {
		t.Errorf("strategies %v", c.Strategies)
	}
	if c.Rate <= 0 || c.Duration <= 0 || c.Stock <= 0 || c.Qty != 1 || c.SKUs != 1 || c.MaxWorkers < c.Workers || c.RMWDelay <= 0 {
		t.Errorf("odd defaults: %+v", c)
	}
}

func TestParseConfigFlagsAndEnv(t *testing.T) {
	c, err := ParseConfig(
		[]string{"--rate", "40", "--replicas", "http://127.0.0.1:1, http://127.0.0.1:2/", "--strategies", "atomic,unsafe"},
		envOf("LOADTEST_RATE", "999", "LOADTEST_STOCK", "7", "LOADTEST_DURATION", "2s", "LOADTEST_SKUS", "3", "LOADTEST_SKEW", "1.5"),
		&bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Rate != 40 {
		t.Errorf("flag must win over env: rate %d", c.Rate)
	}
	if c.Stock != 7 || c.Duration != 2*time.Second || c.SKUs != 3 || c.Skew != 1.5 {
		t.Errorf("env fallbacks not applied: %+v", c)
	}
	if !slices.Equal(c.Replicas, []string{"http://127.0.0.1:1", "http://127.0.0.1:2"}) {
		t.Errorf("replicas %v", c.Replicas)
	}
	if !slices.Equal(c.Strategies, []string{"atomic", "unsafe"}) {
		t.Errorf("strategies %v", c.Strategies)
	}
}

func TestParseConfigRequestsAlone(t *testing.T) {
	c, err := ParseConfig([]string{"--requests", "500"}, envOf(), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Requests != 500 || c.Duration != 0 {
		t.Errorf("--requests alone must drop the default duration: %+v", c)
	}
	c, err = ParseConfig([]string{"--requests", "500", "--duration", "3s"}, envOf(), &bytes.Buffer{})
	if err != nil || c.Duration != 3*time.Second {
		t.Errorf("both given: %v %+v", err, c)
	}
}

func TestParseConfigRejects(t *testing.T) {
	cases := []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"--rate", "-1"}, nil, "--rate"},
		{[]string{"--rate", "abc"}, nil, "invalid value"},
		{[]string{"--stock", "0"}, nil, "--stock"},
		{[]string{"--qty", "0"}, nil, "--qty"},
		{[]string{"--qty", "5", "--stock", "4"}, nil, "--qty 5: must be between 1 and --stock (4)"},
		// Field names inside a value are the user's words, not flags.
		{[]string{"--sku-prefix", "Stock Rate"}, nil, `--sku-prefix "Stock Rate": use letters`},
		{[]string{"--duration", "0s"}, nil, "both 0"},
		{[]string{"--duration", "1h"}, nil, "--duration"},
		{[]string{"--requests", "-3"}, nil, "--requests"},
		{[]string{"--skus", "0"}, nil, "--skus"},
		{[]string{"--skew", "0.5"}, nil, "--skew"},
		{[]string{"--workers", "0"}, nil, "--workers"},
		{[]string{"--workers", "50", "--max-workers", "10"}, nil, "--max-workers"},
		{[]string{"--timeout", "0s"}, nil, "--timeout"},
		{[]string{"--strategies", "unsafe,fast"}, nil, `unknown strategy "fast"`},
		{[]string{"--strategies", "atomic,atomic"}, nil, "twice"},
		{[]string{"--strategies", ","}, nil, "no strategy"},
		{[]string{"--replicas", "127.0.0.1:8080"}, nil, "not a base URL"},
		{[]string{"--replicas", "http://127.0.0.1:8080/v1/items"}, nil, "base URL only"},
		{[]string{"--replicas", "http://a:1,http://a:1"}, nil, "twice"},
		{[]string{"--replicas", "http://a:99999"}, nil, "bad port"},
		{[]string{"--replicas", "http://a:1", "--rmw-delay", "5ms"}, nil, "--rmw-delay applies only"},
		{[]string{"--sku-prefix", "no spaces"}, nil, "--sku-prefix"},
		{[]string{"--sku-prefix", strings.Repeat("x", 41)}, nil, "--sku-prefix"},
		{[]string{"extra"}, nil, `unknown command "extra"`},
		{[]string{"compare", "extra"}, nil, `unexpected argument "extra"`},
		{[]string{"--capacity-p99", "1s"}, nil, "--capacity-p99 does not apply to loadtest compare: it belongs to loadtest capacity"},
		{[]string{"--capacity", "--faults", "crash"}, nil, "--capacity and --faults: choose one command"},
		{[]string{"capacity", "--capacity-replicas", "2,x"}, nil, `"x" is not a whole number`},
		{[]string{"capacity", "--capacity-replicas", "2,9"}, nil, "--capacity-replicas 9"},
		{[]string{"capacity", "--capacity-max-rate", "10"}, nil, "--capacity-max-rate 10"},
		{[]string{"capacity", "--capacity-p99", "0s"}, nil, "--capacity-p99 0s: must be between 1ms and 1m"},
		{[]string{"keyed", "--requests", "0"}, nil, "--requests 0: must be between 1 and 10000"},
		{[]string{"capacity", "--replicas", "http://a:1", "--capacity-replicas", "2"}, nil, "scales them"},
		{[]string{"serve", "--mixed"}, nil, "--mixed does not apply to loadtest serve: it belongs to loadtest compare"},
		{[]string{"serve", "--serve-addr", "8090"}, nil, "--serve-addr \"8090\""},
		{[]string{"--serve-addr", "127.0.0.1:1"}, nil, "--serve-addr does not apply to loadtest compare: it belongs to loadtest serve"},
		{nil, []string{"LOADTEST_RATE", "fast"}, "LOADTEST_RATE"},
		{nil, []string{"LOADTEST_STRATEGIES", "nope"}, "unknown strategy"},
		{[]string{"--no-such-flag"}, nil, "not defined"},
		{[]string{"--mixed", "--strategies", "atomic"}, nil, "at least two"},
		{[]string{"faults", "crash", "--mixed"}, nil, "--mixed does not apply to loadtest faults"},
		{[]string{"faults", "crash", "--retries", "2"}, nil, "--retries does not apply to loadtest faults"},
		{[]string{"--cut-rate", "0.2"}, nil, "--cut-rate applies only with --retries"},
		{[]string{"--retries", "2", "--cut-rate", "1"}, nil, "--cut-rate 1"},
		{[]string{"--retries", "11"}, nil, "--retries 11"},
		{[]string{"--check-timeout", "10ms"}, nil, "--check-timeout"},
		{[]string{"--read-every", "-1s"}, nil, "--read-every"},
		{[]string{"--local-replicas", "0"}, nil, "--local-replicas 0: must be between 1 and 8"},
		{[]string{"--local-replicas", "9"}, nil, "--local-replicas 9: must be between 1 and 8"},
		// Whole minutes and hours as bounds read 1m and 1h (the next problem follows each).
		{[]string{"--warmup", "2m", "--check-timeout", "2h", "--strategies", "atomic", "--threshold", "redis-lock:p99<1s"}, nil,
			"--warmup 2m0s: must be between 0s and 1m\n--check-timeout 2h0m0s: must be between 1s and 1h\n"},
		{nil, []string{"LOADTEST_LOCAL_REPLICAS", "12"}, "--local-replicas 12"},
		{[]string{"--replicas", "http://a:1", "--local-replicas", "3"}, nil, "--local-replicas applies only"},
		{[]string{"faults", "crash", "--local-replicas", "1"}, nil, "fault drills need at least 2 replicas"},
		{[]string{"--local-replicas", "4", "--rate", "3"}, nil, "--rate 3: below one request per second for each of the 4 replicas"},
		{[]string{"--replicas", "http://a:1,http://a:2", "--rate", "1"}, nil, "--rate 1"},
		{[]string{"--threshold", "p99 300ms"}, nil, `invalid value "p99 300ms" for --threshold: threshold "p99 300ms": want [strategy:]metric op value`},
		{[]string{"--threshold", "p42<3ms"}, nil, `unknown metric "p42" (known: p50, p95, p99`},
		{[]string{"--threshold", "nope:p99<3ms"}, nil, `unknown strategy "nope"`},
		{[]string{"--threshold", "sales_per_s>=fast"}, nil, `"fast" is not a number`},
		{nil, []string{"LOADTEST_THRESHOLD", "p99"}, "LOADTEST_THRESHOLD"},
		{[]string{"--strategies", "atomic,unsafe", "--threshold", "redis-lock:p99<1s"}, nil, "--threshold redis-lock:p99<1s: redis-lock is not among --strategies (atomic,unsafe)"},
		{[]string{"capacity", "--threshold", "p99<1s"}, nil, "--threshold does not apply to loadtest capacity: it belongs to loadtest compare, loadtest faults, loadtest soak"},
		{[]string{"keyed", "--threshold", "p99<1s"}, nil, "--threshold does not apply to loadtest keyed"},
		{[]string{"--mixed", "--strategies", "atomic,redis-lock", "--threshold", "atomic:p99<1s"}, nil, "give the threshold for all (p99<1s)"},
		{[]string{"serve", "--threshold", "p99<1s"}, nil, "--threshold does not apply to loadtest serve"},
		{[]string{"soak", "--duration", "30s"}, nil, "--duration 30s: must be between 1m and 24h"},
		{[]string{"soak", "--requests", "3"}, nil, "--requests does not apply to loadtest soak"},
		{nil, []string{"LOADTEST_CAPACITY", "true"}, "LOADTEST_CAPACITY=true chose a command before there were commands: use loadtest capacity"},
		{[]string{"--faults"}, nil, "--faults chose a command before there were commands: use loadtest faults"},
	}
	for _, c := range cases {
		_, err := ParseConfig(c.args, envOf(c.env...), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %v: err %v, want it to mention %q", c.args, c.env, err, c.want)
		}
	}
}

func TestParseConfigLocalReplicas(t *testing.T) {
	c, err := ParseConfig([]string{"faults", "--local-replicas", "8", "crash"}, envOf(), &bytes.Buffer{})
	if err != nil || c.LocalReplicas != 8 {
		t.Fatalf("--local-replicas 8: %d, %v", c.LocalReplicas, err)
	}
	c, err = ParseConfig(nil, envOf("LOADTEST_LOCAL_REPLICAS", "1"), &bytes.Buffer{})
	if err != nil || c.LocalReplicas != 1 {
		t.Fatalf("LOADTEST_LOCAL_REPLICAS=1: %d, %v", c.LocalReplicas, err)
	}
}

func TestParseConfigReportsAllProblems(t *testing.T) {
	_, err := ParseConfig([]string{"--rate", "-1", "--stock", "0"}, envOf(), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--rate") || !strings.Contains(err.Error(), "--stock") {
		t.Fatalf("want both problems at once, got %v", err)
	}
}

func TestHelp(t *testing.T) {
	var out bytes.Buffer
	_, err := ParseConfig([]string{"--help"}, envOf(), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err %v", err)
	}
	for _, want := range []string{"--rate", "LOADTEST_RATE", "--replicas", "--strategies", "--rmw-delay", "MONGO_URI", "Exit status",
		"--mixed", "--retries", "--local-replicas", "LOADTEST_LOCAL_REPLICAS", "--attempt-timeout", "--cut-rate", "--check-history", "--read-every", "--check-timeout", "linearizab",
		"--threshold", "LOADTEST_THRESHOLD", "sales_per_s", "error_rate", "3 when every safety check", "report.html"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
	// run() turns --help into exit 0 and bad flags into 2, before any
	// request could be sent.
	if code := run(t.Context(), []string{"--help"}, envOf(), &bytes.Buffer{}, &bytes.Buffer{}); code != exitOK {
		t.Errorf("--help exit %d", code)
	}
	var stderr bytes.Buffer
	if code := run(t.Context(), []string{"--rate", "x"}, envOf(), &bytes.Buffer{}, &stderr); code != exitError {
		t.Errorf("bad flag exit %d", code)
	}
	if !strings.Contains(stderr.String(), "--rate") {
		t.Errorf("bad flag message: %s", stderr.String())
	}
}

// TestParseConfigThresholds: --threshold is repeatable and takes
// comma-separated thresholds, for every run or one strategy's.
func TestParseConfigThresholds(t *testing.T) {
	c, err := ParseConfig([]string{"--threshold", "p(99)<300ms", "--threshold", "atomic:sales_per_s>=150,oversold==0"}, envOf(), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, th := range c.Thresholds {
		got = append(got, fmt.Sprintf("%s|%s|%s|%g", th.Strategy, th.Metric, th.Op, th.Bound))
	}
	if want := []string{"|p99|<|300", "atomic|sales_per_s|>=|150", "|oversold|==|0"}; !slices.Equal(got, want) {
		t.Errorf("thresholds %q, want %q", got, want)
	}
	c, err = ParseConfig(nil, envOf("LOADTEST_THRESHOLD", "max<2s"), &bytes.Buffer{})
	if err != nil || len(c.Thresholds) != 1 || c.Thresholds[0].Bound != 2000 {
		t.Errorf("LOADTEST_THRESHOLD=max<2s: %+v, %v", c.Thresholds, err)
	}
}

// TestParseConfigCapacity: loadtest capacity has the defaults a sweep needs
// (short steps, no read-modify-write delay, no reads) unless they are set.
func TestParseConfigCapacity(t *testing.T) {
	c, err := ParseConfig([]string{"capacity", "--capacity-replicas", "2,4,8"}, envOf(), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Scenario.(*harness.Capacity); c.Duration != 3*time.Second || c.RMWDelay != 0 || c.ReadEvery != 0 || !slices.Equal(s.Replicas, []int{2, 4, 8}) {
		t.Errorf("capacity defaults: duration %s, rmw-delay %s, read-every %s, replicas %v", c.Duration, c.RMWDelay, c.ReadEvery, s.Replicas)
	}
	c, err = ParseConfig([]string{"capacity", "--rmw-delay", "5ms", "--duration", "4s"}, envOf(), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Duration != 4*time.Second || c.RMWDelay != 5*time.Millisecond {
		t.Errorf("explicit settings lost: duration %s, rmw-delay %s", c.Duration, c.RMWDelay)
	}
}

// TestCommands: each command sets its mode and its own defaults, takes its
// settings from the environment, and shows only its flags in --help.
func TestCommands(t *testing.T) {
	c, err := ParseConfig([]string{"soak", "--rate", "50", "--duration", "3m"}, envOf(), &bytes.Buffer{})
	if s, ok := c.Scenario.(*harness.Soak); err != nil || !ok || s.Duration != 3*time.Minute || c.Stock != 6000 || c.Timeout != 18*time.Second {
		t.Errorf("soak: %+v, stock %d, timeout %s, %v; want 3m, 50/s × 60s × 2, 3 × 1s + 15s", c.Scenario, c.Stock, c.Timeout, err)
	}
	c, err = ParseConfig([]string{"faults", "--fault-ttl", "2s"}, envOf("LOADTEST_FAULTS", "crash,pause"), &bytes.Buffer{})
	if s, ok := c.Scenario.(*harness.Faults); err != nil || !ok || !slices.Equal(s.Faults, []string{"crash", "pause"}) || c.Timeout != 21*time.Second || c.Stock != 2000 {
		t.Errorf("LOADTEST_FAULTS=crash,pause: %+v, timeout %s, stock %d, %v", c.Scenario, c.Timeout, c.Stock, err)
	}
	c, err = ParseConfig([]string{"keyed", "--requests", "12"}, envOf(), &bytes.Buffer{})
	if s, ok := c.Scenario.(*harness.Keyed); err != nil || !ok || s.Purchases != 12 || c.Timeout != 18*time.Second {
		t.Errorf("keyed --requests 12: %+v, %+v, %v", c.Config, c.Scenario, err)
	}
	for _, cmd := range commands {
		var out bytes.Buffer
		if _, err := ParseConfig([]string{cmd.name, "--help"}, envOf(), &out); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%s --help: %v", cmd.name, err)
		}
		help := out.String()
		if !strings.Contains(help, "Usage: go run ./loadtest "+cmd.name) || !strings.Contains(help, "LOADTEST_RATE") {
			t.Errorf("%s --help:\n%s", cmd.name, help)
		}
		if own := map[string]string{"capacity": "--capacity-p99", "faults": "--fault-ttl", "serve": "--serve-addr", "compare": "--mixed"}[cmd.name]; own != "" &&
			!strings.Contains(help, own) {
			t.Errorf("%s --help lacks %s", cmd.name, own)
		}
		if cmd.name != "compare" && strings.Contains(help, "--mixed") {
			t.Errorf("%s --help shows compare's --mixed", cmd.name)
		}
	}
}

// TestOldSpellings: the flags that chose a command before there were
// commands are refused, with the command line to use instead.
func TestOldSpellings(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--faults", "crash", "--repeat", "2"}, "--faults chose a command before there were commands: use loadtest faults crash --repeat 2"},
		{[]string{"--faults=pause"}, "use loadtest faults pause"},
		{[]string{"--rate", "40", "--soak", "2m"}, "--soak chose a command before there were commands: use loadtest soak --rate 40 --duration 2m"},
		{[]string{"--capacity"}, "use loadtest capacity"},
		{[]string{"--keyed-drill"}, "use loadtest keyed"},
		{[]string{"--serve"}, "use loadtest serve"},
	} {
		var out bytes.Buffer
		_, err := ParseConfig(tc.args, envOf(), &out)
		if err == nil || !strings.HasSuffix(err.Error(), tc.want) || out.Len() > 0 {
			t.Errorf("%v: %v, stderr %q; want an error ending %q", tc.args, err, out.String(), tc.want)
		}
	}
}
