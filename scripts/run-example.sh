#!/usr/bin/env bash
# Starts a fresh server (DATABASE_URL if set, else a private cluster in a temp
# dir) and runs the two-agent handoff example against it.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --bin orbit-commons --example two_agent_handoff
data_dir=$(mktemp -d /tmp/orbit-example.XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
ORBIT_DATA_DIR="$data_dir" ORBIT_BIND="127.0.0.1:$port" ORBIT_LOG=warn \
  target/debug/orbit-commons serve &
server=$!
cleanup() {
  kill -TERM "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  rm -rf "$data_dir"
}
trap cleanup EXIT
for _ in $(seq 1 120); do
  if curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; then break; fi
  sleep 0.5
done
target/debug/examples/two_agent_handoff "http://127.0.0.1:$port"
