#!/usr/bin/env bash
# Python interop: start a fresh server on a free port, then run
# tests/python/interop.py against it (stubs generated from proto/ with
# grpcio-tools). Usage: scripts/python-interop.sh [SERVER_BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."

server_bin=${1:-target/debug/wsfs-server}
python3 -c 'import grpc_tools, grpc' 2>/dev/null || {
  echo "grpcio-tools not found (python3 -m pip install grpcio-tools)" >&2; exit 2; }

work=$(mktemp -d)
log="$work/server.log"
"$server_bin" --listen 127.0.0.1:0 --data-dir "$work/data" >"$log" 2>&1 &
server_pid=$!
trap 'kill $server_pid 2>/dev/null || true; wait $server_pid 2>/dev/null || true; rm -rf "$work"' EXIT

addr=""
for _ in $(seq 1 100); do
  addr=$(sed -n 's/^wsfs-server listening on \([^ ]*\).*/\1/p' "$log")
  [ -n "$addr" ] && break
  sleep 0.1
done
[ -n "$addr" ] || { echo "server did not start:" >&2; cat "$log" >&2; exit 1; }

python3 tests/python/interop.py "$addr"
