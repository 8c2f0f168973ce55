#!/usr/bin/env bash
# The project's test command, in two tiers.
#
#   scripts/test.sh           the full tier, what CI runs: every test,
#                             the drills and sweeps too, under the race
#                             detector, with every go vet analyzer
#   scripts/test.sh -short    the quick tier: every package's fast tests,
#                             without the race detector; the drills, soaks,
#                             sweeps and failover tests skip
#                             (testskip.Long). Its target is 90 s warm
#                             on 2 cores, which it meets in about half
#                             the runs on a machine shared with other
#                             work (84 to 97 s); docs/harness.md says
#                             where the time goes.
#
# Any other arguments go to go test (a -run pattern, -v, one more -p).
# Both tiers end with a line naming every test that skipped for a missing
# tool (Chromium, Prometheus, redis-server, gcc, PostgreSQL) and how to get
# it; internal/testreport reads go test -json and writes that and the usual
# ok/FAIL lines, with the output of failed tests only (-v: everything).
#
# Needs only Go. Servers come from internal/devstore: MONGO_URI and REDIS_ADDR
# when set, otherwise FerretDB (behind the atomicity gate) and etcd in
# devstored processes built from this module, and a redis-server from PATH
# (or miniredis when there is none).
#
# Full tier: -vet=all runs every go vet analyzer on the race build (go vet
# without compiling the code a second time, in another mode). go test vets
# only packages with tests; those without are vetted first, in the
# Dockerfile's build mode that devstored and the stock binaries share.
#
# Quick tier: no -race. A race build runs the tests several times slower
# and links bigger binaries; the quick tier is for catching a broken
# strategy or handler in a minute, and the full tier keeps the race
# coverage.
#
# -p 4 (the quick tier: -p 8): that many test binaries at once on any
# machine (a later -p wins). Most test time is spent waiting on leases,
# pauses and failovers, so on two cores four packages finish sooner than
# two. The quick tier's tests wait more and compute less (no race
# detector, no drills), and with eight at once its last package, the
# stock server's, starts sooner; the full tier's drills need the quieter
# machine of four.
#
# -ldflags=-w leaves DWARF out of the test binaries, which go test links
# afresh on every run; stack traces and race reports do not need it.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=false
report_flags=()
# TEST_JSON=FILE keeps go test's JSON (every test's elapsed time) in FILE.
if [[ -n ${TEST_JSON-} ]]; then
	report_flags+=(-json "$TEST_JSON")
fi
for a in "$@"; do
	case $a in
	-short | -short=true | -test.short | -test.short=true) quick=true ;;
	-v | -v=true | -test.v | -test.v=true) report_flags+=(-v) ;;
	esac
done

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/testreport" ./internal/testreport

echo "== go vet (the packages without tests)"
CGO_ENABLED=0 go vet -trimpath ./internal/storeproc/devstored ./loadtest/env/envtest ./pkg/lock/locktest ./services/stock/server/servertest ./internal/devstore/devstoretest ./internal/testskip

if $quick; then
	echo "== go test -short ./... (the quick tier; scripts/test.sh runs everything)"
	go test -ldflags=-w -count=1 -p 8 -timeout 5m -json "$@" ./... | "$bin/testreport" "${report_flags[@]}"
else
	echo "== go test -race -vet=all ./..."
	go test -race -vet=all -ldflags=-w -count=1 -p 4 -timeout 25m -json "$@" ./... | "$bin/testreport" "${report_flags[@]}"
fi
