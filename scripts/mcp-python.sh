#!/usr/bin/env bash
# The MCP endpoint driven by the official `mcp` Python SDK from PyPI as a real client
# (issue 24): scripts/mcp_client.py lists the tools, runs one lease -> checkpoint ->
# handoff -> accept story between two agents, and checks that a bad token's 401
# reaches the SDK with the service's message.
#
#   scripts/mcp-python.sh
#
# Settings: ORBIT_BIN (a built orbit-commons; default: `cargo build` the debug
# binary). The service runs on its embedded default (a private PostgreSQL cluster in
# a temporary ORBIT_DATA_DIR) on a free port. The SDK lives in a venv under
# target/mcp-python/; the service log is kept there.
set -euo pipefail
cd "$(dirname "$0")/.."

MCP_VERSION=2.3.0
OUT=target/mcp-python
VENV=$OUT/venv-$MCP_VERSION
mkdir -p "$OUT"

if ! "$VENV/bin/python" -c "import mcp, importlib.metadata as m; assert m.version('mcp') == '$MCP_VERSION'" 2>/dev/null; then
    echo "== installing mcp $MCP_VERSION into $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "mcp==$MCP_VERSION"
fi

if [ -n "${ORBIT_BIN:-}" ]; then
    BIN=$ORBIT_BIN
else
    cargo build --quiet --locked --bin orbit-commons
    BIN=target/debug/orbit-commons
fi

DATA=$(mktemp -d /tmp/oc-mcp-py-XXXXXX)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
BASE="http://127.0.0.1:$PORT"
SERVER=""

cleanup() {
    if [ -n "$SERVER" ] && kill -0 "$SERVER" 2>/dev/null; then
        # SIGTERM: the service stops gracefully and stops its private cluster.
        kill -TERM "$SERVER" 2>/dev/null || true
        for _ in $(seq 1 60); do
            kill -0 "$SERVER" 2>/dev/null || break
            sleep 0.5
        done
        kill -KILL "$SERVER" 2>/dev/null || true
        wait "$SERVER" 2>/dev/null || true
    fi
    if [ -f "$DATA/postgres/data/postmaster.pid" ]; then
        kill -QUIT "$(head -1 "$DATA/postgres/data/postmaster.pid")" 2>/dev/null || true
        sleep 1
    fi
    cp "$DATA/serve.log" "$OUT/serve.log" 2>/dev/null || true
    rm -rf "$DATA"
}
trap cleanup EXIT

echo "== starting $BIN on $BASE (data in $DATA)"
env -u DATABASE_URL \
    ORBIT_DATA_DIR="$DATA" \
    ORBIT_BIND="127.0.0.1:$PORT" \
    ORBIT_LOG=warn \
    "$BIN" serve >"$DATA/serve.log" 2>&1 &
SERVER=$!
for _ in $(seq 1 120); do
    if curl -fsS "$BASE/readyz" >/dev/null 2>&1; then break; fi
    kill -0 "$SERVER" 2>/dev/null || { cat "$DATA/serve.log"; exit 1; }
    sleep 0.5
done
curl -fsS "$BASE/readyz" >/dev/null || { echo "the service did not become ready"; cat "$DATA/serve.log"; exit 1; }

echo "== mcp $MCP_VERSION against $BASE/mcp"
"$VENV/bin/python" scripts/mcp_client.py "$BASE"
