# Sourced by the test scripts: starts "$server_bin" on a free loopback port
# with a fresh data directory, sets $addr, $work and $log, and stops the
# server and removes $work when the script exits.
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
