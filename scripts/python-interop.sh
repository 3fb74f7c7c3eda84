#!/usr/bin/env bash
# Python interop: start a fresh server on a free port, then run
# tests/python/interop.py against it (stubs generated from proto/ with
# grpcio-tools). Usage: scripts/python-interop.sh [SERVER_BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."

server_bin=${1:-target/debug/wsfs-server}
python3 -c 'import grpc_tools, grpc' 2>/dev/null || {
  echo "grpcio-tools not found (python3 -m pip install grpcio-tools)" >&2; exit 2; }

. "$(dirname "$0")/start-server.sh"

python3 tests/python/interop.py "$addr"
