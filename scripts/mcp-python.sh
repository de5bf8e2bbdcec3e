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

. scripts/lib.sh

MCP_VERSION=2.3.0
OUT=target/mcp-python
mkdir -p "$OUT"
venv_with "$OUT/venv-$MCP_VERSION" mcp "$MCP_VERSION"
orbit_bin
start_orbit oc-mcp-py

echo "== mcp $MCP_VERSION against $BASE/mcp"
"$OUT/venv-$MCP_VERSION/bin/python" scripts/mcp_client.py "$BASE"
