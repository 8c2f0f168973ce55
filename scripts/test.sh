#!/usr/bin/env bash
# The project's test command: vet, then every test under the race detector.
#
# Needs only Go. Servers come from internal/devstore: MONGO_URI and REDIS_ADDR
# when set, otherwise an embedded FerretDB (behind the atomicity gate) and a
# redis-server from PATH (or miniredis when there is none).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== go vet ./..."
go vet ./...

echo "== go test -race ./..."
go test -race -count=1 -timeout 25m "$@" ./...
