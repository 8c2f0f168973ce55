#!/usr/bin/env bash
# The Redis lock's contended comparison (stocklock, bsm/redislock, redsync)
# and the floor of a lock cycle, as docs/benchmarks.md reports them:
# redis-server pinned to one core and the benchmark to the other
# (taskset), so that they do not take each other's CPU; the libraries
# interleaved run by run in one invocation (BENCH_ROUNDS rounds, default
# 5), BenchmarkFloor's cases in the same rounds, with a summary of
# medians, ranges and ratios at the end. Load averages before and after
# are printed, for the record. BENCH picks the benchmarks (default
# Contended; Floor runs the floor cases alone).
#
#   scripts/bench-redislock.sh                      # 5 rounds of 2s
#   BENCH_ROUNDS=7 BENCHTIME=3s scripts/bench-redislock.sh
#   SERVER_CPU=1 BENCH_CPU=0 scripts/bench-redislock.sh
#
# Needs redis-server and redis-cli on PATH, and taskset (util-linux).
set -euo pipefail
cd "$(dirname "$0")/.."

server_cpu=${SERVER_CPU:-0}
bench_cpu=${BENCH_CPU:-1}
export BENCH_ROUNDS=${BENCH_ROUNDS:-5}
benchtime=${BENCHTIME:-2s}

dir=$(mktemp -d)
pid=
cleanup() {
	if [[ -n $pid ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
	rm -rf "$dir"
}
trap cleanup EXIT

# The test binary first, so that compiling does not overlap the run.
go test -c -o "$dir/redislock.test" ./pkg/lock/redislock

# A free port: try a few, since another process may take one first.
for _ in 1 2 3 4 5; do
	port=$((20000 + RANDOM % 20000))
	taskset -c "$server_cpu" redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$dir" --logfile "$dir/redis.log" &
	pid=$!
	for _ in $(seq 50); do
		redis-cli -p "$port" ping >/dev/null 2>&1 && break
		sleep 0.1
	done
	if redis-cli -p "$port" ping >/dev/null 2>&1; then break; fi
	kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=
done
[[ -n $pid ]] || { echo "redis-server did not start" >&2; exit 1; }

echo "redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') on cpu $server_cpu, benchmark on cpu $bench_cpu, $BENCH_ROUNDS rounds of $benchtime"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
(cd pkg/lock/redislock && REDIS_ADDR=127.0.0.1:$port taskset -c "$bench_cpu" "$dir/redislock.test" \
	-test.run '^$' -test.bench "${BENCH:-Contended}" -test.benchtime "$benchtime" -test.benchmem)
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
