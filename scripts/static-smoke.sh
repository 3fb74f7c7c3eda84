#!/usr/bin/env bash
# The static (musl) build: both binaries are statically linked and work
# together, so they run on any x86-64 Linux image, Alpine included.
# Build first:
#   rustup target add x86_64-unknown-linux-musl
#   CC_x86_64_unknown_linux_musl=gcc cargo build --release \
#     --target x86_64-unknown-linux-musl -p wsfs-server -p wsfs-client
# Usage: scripts/static-smoke.sh [BIN_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${1:-target/x86_64-unknown-linux-musl/release}
for program in wsfs-server wsfs; do
  # A static binary names no interpreter (no dynamic loader, no libc.so).
  if readelf -l "$bin/$program" | grep -q 'Requesting program interpreter'; then
    echo "FAIL $bin/$program is dynamically linked" >&2
    exit 1
  fi
done

server_bin="$bin/wsfs-server"
. "$(dirname "$0")/start-server.sh"
export WSFS_SERVER="http://$addr" WSFS_CONFIG="$work/context.json"
export WSFS_SESSION=$("$bin/wsfs" session create)
"$bin/wsfs" write notes.txt 'static'
[ "$("$bin/wsfs" cat notes.txt)" = "static" ] || { echo "FAIL: the static CLI read back something else" >&2; exit 1; }
echo "ok   static wsfs-server and wsfs: $("$bin/wsfs-server" --version)"
