#!/usr/bin/env bash
# Speed of the `wsfs` CLI beside local baselines (a program that prints
# figures, not a test). Needs release builds:
#   cargo build --release -p wsfs-server -p wsfs-client
# Usage: scripts/cli-speed.sh [GREP_TREE]   (default: a cargo registry source tree)
set -euo pipefail
cd "$(dirname "$0")/.."

bin=target/release
tree=${1:-$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/ 2>/dev/null | head -1)}
work=$(mktemp -d)
log="$work/server.log"
"$bin/wsfs-server" --listen 127.0.0.1:0 --data-dir "$work/data" >"$log" 2>&1 &
server_pid=$!
trap 'kill $server_pid 2>/dev/null || true; wait $server_pid 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do
  addr=$(sed -n 's/^wsfs-server listening on \([^ ]*\).*/\1/p' "$log")
  [ -n "$addr" ] && break
  sleep 0.1
done
export WSFS_SERVER="http://$addr"
wsfs() { "$bin/wsfs" "$@"; }
secs() { local start=$(date +%s.%N); "$@" >/dev/null; echo "$(date +%s.%N) - $start" | bc; }
row() { printf '%-44s %8.2f s   baseline %-28s %8.2f s\n' "$1" "$2" "$3" "$4"; }

export WSFS_SESSION=$(wsfs session create --max-write-bytes $((2 * 1024 * 1024 * 1024)))

echo "== 1 GiB file (memory session)"
head -c $((1024 * 1024 * 1024)) /dev/urandom >"$work/big.bin"
cat "$work/big.bin" >/dev/null
row "wsfs put big.bin (1 GiB)" "$(secs wsfs -q put "$work/big.bin" big.bin)" "cp big.bin" "$(secs cp "$work/big.bin" "$work/big.copy")"
rm -f "$work/big.copy"
row "wsfs get big.bin - > /dev/null" "$(secs sh -c "'$bin/wsfs' get big.bin - >/dev/null")" "cat big.bin > /dev/null" "$(secs sh -c "cat '$work/big.bin' >/dev/null")"
rm -f "$work/big.bin"; wsfs rm big.bin >/dev/null

echo "== grep over $tree"
wsfs -q push "$tree" src
files=$(wsfs glob '**' --max 1000000 --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["paths"]))')
echo "   ($files files, $(du -sh "$tree" | cut -f1))"
row "wsfs grep -F -m 100000 'unsafe fn'" "$(secs sh -c "'$bin/wsfs' grep -F -m 100000 'unsafe fn' >/dev/null")" "rg -F --no-ignore 'unsafe fn'" "$(secs sh -c "rg -uu -F 'unsafe fn' '$tree' >/dev/null")"
row "wsfs grep -i 'fn \\w+_test'" "$(secs sh -c "'$bin/wsfs' grep -i -m 100000 'fn \\w+_test' >/dev/null || true")" "rg -i 'fn \\w+_test'" "$(secs sh -c "rg -uu -i 'fn \\w+_test' '$tree' >/dev/null || true")"
wsfs -q rm -r src

echo "== push of 10,000 small files"
small="$work/small"
python3 - "$small" <<'PY'
import os, sys
root = sys.argv[1]
for i in range(10000):
    d = os.path.join(root, f"d{i // 100:03}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:05}.txt"), "w") as f:
        f.write(f"file {i}\n" * (1 + i % 50))
PY
row "wsfs push (first: all 10,000)" "$(secs wsfs -q push "$small" small)" "cp -r" "$(secs cp -r "$small" "$work/small.copy")"
row "wsfs push (second: nothing changed)" "$(secs wsfs -q push "$small" small)" "cp -r again" "$(secs cp -r "$small" "$work/small.copy3")"
row "wsfs pull into an empty directory" "$(secs wsfs -q pull small "$work/pulled")" "cp -r" "$(secs cp -r "$small" "$work/small.copy2")"
