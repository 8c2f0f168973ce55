#!/usr/bin/env bash
# The project's test command: every test under the race detector, with
# every go vet analyzer run on the same build (-vet=all: go vet without
# compiling the code a second time, in another mode). go test vets only
# packages with tests; the three without are vetted first, in the
# Dockerfile's build mode that devstored and the stock binaries share.
#
# Needs only Go. Servers come from internal/devstore: MONGO_URI and REDIS_ADDR
# when set, otherwise FerretDB (behind the atomicity gate) and etcd in
# devstored processes built from this module, and a redis-server from PATH
# (or miniredis when there is none).
#
# -p 4: four test binaries at once on any machine (a later -p wins). Most
# test time is spent waiting on leases, pauses and failovers, so on two
# cores four packages finish sooner than two.
#
# -ldflags=-w leaves DWARF out of the test binaries, which go test links
# afresh on every run; stack traces and race reports do not need it.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== go vet (the packages without tests)"
CGO_ENABLED=0 go vet -trimpath ./internal/storeproc/devstored ./loadtest/env/envtest ./pkg/lock/locktest

echo "== go test -race -vet=all ./..."
go test -race -vet=all -ldflags=-w -count=1 -p 4 -timeout 25m "$@" ./...
