# Shared by the scripts that drive a built service from a Python tool
# (scripts/mcp-python.sh, scripts/schemathesis.sh); sourced, never run. It owns: the
# tool's venv, the binary to run, and one service on its embedded default (a private
# PostgreSQL cluster in a temporary ORBIT_DATA_DIR) on a free port, stopped on exit.
#
# The caller sets OUT (its directory under target/) before `start_orbit`; the
# service log is copied there when the script exits.

# venv_with VENV PACKAGE VERSION: a venv at VENV holding PACKAGE==VERSION (installed
# from PyPI unless it is there already).
venv_with() {
    local venv=$1 package=$2 version=$3
    if ! "$venv/bin/python" -c 'import importlib.metadata as m, sys
sys.exit(m.version(sys.argv[1]) != sys.argv[2])' "$package" "$version" 2>/dev/null; then
        echo "== installing $package $version into $venv"
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check "$package==$version"
    fi
}

# orbit_bin: sets BIN to ORBIT_BIN, or builds the debug binary and names it.
orbit_bin() {
    if [ -n "${ORBIT_BIN:-}" ]; then
        BIN=$ORBIT_BIN
    else
        cargo build --quiet --locked --bin orbit-commons
        BIN=target/debug/orbit-commons
    fi
}

# start_orbit PREFIX [NAME=VALUE...]: starts "$BIN serve" with these extra settings
# on a free port, data under /tmp/PREFIX-*, and waits until it is ready. Sets DATA,
# PORT, BASE and SERVER; stop_orbit runs on exit.
start_orbit() {
    local prefix=$1
    shift
    DATA=$(mktemp -d "/tmp/$prefix-XXXXXX")
    PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    BASE="http://127.0.0.1:$PORT"
    SERVER=""
    trap stop_orbit EXIT
    echo "== starting $BIN on $BASE (data in $DATA)"
    env -u DATABASE_URL \
        ORBIT_DATA_DIR="$DATA" \
        ORBIT_BIND="127.0.0.1:$PORT" \
        ORBIT_LOG=warn \
        "$@" \
        "$BIN" serve >"$DATA/serve.log" 2>&1 &
    SERVER=$!
    for _ in $(seq 1 120); do
        if curl -fsS "$BASE/readyz" >/dev/null 2>&1; then break; fi
        kill -0 "$SERVER" 2>/dev/null || { cat "$DATA/serve.log"; exit 1; }
        sleep 0.5
    done
    curl -fsS "$BASE/readyz" >/dev/null || { echo "the service did not become ready"; cat "$DATA/serve.log"; exit 1; }
}

# stop_orbit: stops the service (SIGTERM: it stops gracefully and stops its private
# cluster), a cluster it left running, keeps its log in OUT and removes DATA.
stop_orbit() {
    if [ -n "${SERVER:-}" ] && kill -0 "$SERVER" 2>/dev/null; then
        kill -TERM "$SERVER" 2>/dev/null || true
        for _ in $(seq 1 60); do
            kill -0 "$SERVER" 2>/dev/null || break
            sleep 0.5
        done
        kill -KILL "$SERVER" 2>/dev/null || true
        wait "$SERVER" 2>/dev/null || true
    fi
    # A cluster left running (the service was killed): immediate shutdown.
    if [ -f "$DATA/postgres/data/postmaster.pid" ]; then
        kill -QUIT "$(head -1 "$DATA/postgres/data/postmaster.pid")" 2>/dev/null || true
        sleep 1
    fi
    cp "$DATA/serve.log" "$OUT/serve.log" 2>/dev/null || true
    rm -rf "$DATA"
}
