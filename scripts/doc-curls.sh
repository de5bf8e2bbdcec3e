#!/usr/bin/env bash
# Runs every shell example of the README quick start, docs/HANDOFF.md and agents.md against
# a freshly started server, so the documentation cannot drift from the service.
#
# A block fails the run when any curl in it gets a status >= 400, unless the block
# says `# expect: NNN`, in which case that status is required instead.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --bin orbit-commons

data_dir=$(mktemp -d /tmp/orbit-docs.XXXXXX)
blocks=$(mktemp -d /tmp/orbit-doc-blocks.XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
ORBIT_DATA_DIR="$data_dir" ORBIT_BIND="127.0.0.1:$port" ORBIT_LOG=warn target/debug/orbit-commons serve &
server=$!
cleanup() {
  kill -TERM "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  rm -rf "$data_dir" "$blocks"
}
trap cleanup EXIT
for _ in $(seq 1 120); do
  curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  sleep 0.5
done

# Extracts the ```sh blocks of a file (between `<!-- NAME:begin/end -->` markers
# when a name is given) into numbered files.
extract() {
  python3 - "$1" "$2" "${3:-}" <<'PY'
import re, sys, pathlib
text = pathlib.Path(sys.argv[1]).read_text()
marker = sys.argv[3]
if marker:
    start = text.index(f"<!-- {marker}:begin -->")
    end = text.index(f"<!-- {marker}:end -->")
    text = text[start:end]
out = pathlib.Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
for i, block in enumerate(re.findall(r"```sh\n(.*?)```", text, re.S)):
    (out / f"{i:02d}.sh").write_text(block)
PY
}
extract README.md "$blocks/readme" quickstart
extract docs/HANDOFF.md "$blocks/handoff"
extract agents.md "$blocks/agents"

# What every block sees: a curl that fails on unexpected statuses and keeps the
# last body in $LAST. Its own `-w` comes last, so it wins over a block's.
BASE="http://127.0.0.1:$port"
export BASE
curl() {
  local out status
  out=$(command curl -sS "$@" -w '\n%{http_code}') || return 1
  status=${out##*$'\n'}
  LAST=${out%$'\n'*}
  printf '%s\n' "$LAST"
  if [ -n "${EXPECT:-}" ]; then
    [ "$status" = "$EXPECT" ] || { echo "doc-curls: expected HTTP $EXPECT, got $status: curl $*" >&2; return 1; }
  elif [ "$status" -ge 400 ]; then
    echo "doc-curls: HTTP $status: curl $*" >&2
    return 1
  fi
}
j() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }

run_block() {
  local file=$1 expect
  expect=$(sed -n 's/.*# expect: \([0-9][0-9][0-9]\).*/\1/p' "$file" | head -n1)
  echo "== ${file#"$blocks"/}${expect:+ (expects $expect)}"
  EXPECT=$expect
  # Blocks share one shell, like a reader's terminal.
  # shellcheck disable=SC1090
  source "$file"
  EXPECT=
}

readme=("$blocks"/readme/*.sh)
[ "${#readme[@]}" -ge 5 ] || { echo "doc-curls: no quick start blocks found in README.md" >&2; exit 1; }
# Twice, as a reader who pastes it again would: it must not collide with its
# first run.
for _ in 1 2; do
  for f in "${readme[@]}"; do run_block "$f"; done
  sleep 1
done
echo "README quick start: ok (${#readme[@]} blocks, twice)"

# docs/HANDOFF.md assumes a task leased by the giver, a checkpoint and a taker.
new_token() {
  curl -X POST "$BASE/api/v1/contributors" -H 'Content-Type: application/json' \
    -d "{\"type\":\"AGENT\",\"name\":\"$1\"}" | j "['data']['token']"
}
GIVER=$(new_token giver)
TAKER=$(new_token taker)
TAKER_ID=$(curl "$BASE/api/v1/me" -H "Authorization: Bearer $TAKER" | j "['data']['contributor']['id']")
curl -X POST "$BASE/api/v1/orbits" -H "Authorization: Bearer $GIVER" -H 'Content-Type: application/json' \
  -d '{"slug":"handoff-doc","name":"Handoff doc"}' >/dev/null
curl -X POST "$BASE/api/v1/orbits/handoff-doc/join" -H "Authorization: Bearer $TAKER" >/dev/null
TASK=$(curl -X POST "$BASE/api/v1/orbits/handoff-doc/tasks" -H "Authorization: Bearer $GIVER" \
  -H 'Idempotency-Key: doc-task' -H 'Content-Type: application/json' -d '{"title":"doc"}' | j "['data']['id']")
V=$(curl -X POST "$BASE/api/v1/tasks/$TASK/leases" -H "Authorization: Bearer $GIVER" \
  -H 'Idempotency-Key: doc-lease' | j "['data']['lease_version']")
CKPT=$(curl -X POST "$BASE/api/v1/tasks/$TASK/checkpoints" -H "Authorization: Bearer $GIVER" \
  -H 'Idempotency-Key: doc-ckpt' -H 'Content-Type: application/json' \
  -d "{\"lease_version\":$V,\"summary\":\"s\",\"state\":{}}" | j "['data']['id']")
offer() {
  curl -X POST "$BASE/api/v1/tasks/$TASK/handoffs" -H "Authorization: Bearer $GIVER" \
    -H "Idempotency-Key: doc-offer-$1" -H 'Content-Type: application/json' \
    -d "{\"lease_version\":$V,\"checkpoint_id\":$CKPT,\"to_contributor_id\":$TAKER_ID,\"message\":\"m\"}" \
    | j "['data']['id']"
}
handoff=("$blocks"/handoff/*.sh)
[ "${#handoff[@]}" -eq 5 ] || {
  echo "doc-curls: docs/HANDOFF.md has ${#handoff[@]} sh blocks; teach this script the new ones" >&2
  exit 1
}
run_block "${handoff[0]}"   # offer
HANDOFF=$(printf '%s' "$LAST" | j "['data']['id']")
run_block "${handoff[1]}"   # withdraw
HANDOFF2=$(offer 2)
run_block "${handoff[2]}"   # decline
HANDOFF3=$(offer 3)
run_block "${handoff[3]}"   # accept
run_block "${handoff[4]}"   # reads
echo "docs/HANDOFF.md examples: ok"

# agents.md walks one agent through the service; its examples assume an orbit
# `demo`, a free task, a handoff offered to the agent, and a problem.
agents=("$blocks"/agents/*.sh)
[ "${#agents[@]}" -eq 18 ] || {
  echo "doc-curls: agents.md has ${#agents[@]} sh blocks; teach this script the new ones" >&2
  exit 1
}
OWNER=$(new_token demo-owner)
curl -X POST "$BASE/api/v1/orbits" -H "Authorization: Bearer $OWNER" -H 'Content-Type: application/json' \
  -d '{"slug":"demo","name":"Demo orbit"}' >/dev/null
# The quick start: one free task; its giver registers itself; the acceptor is
# another member of demo.
curl -X POST "$BASE/api/v1/orbits/demo/tasks" -H "Authorization: Bearer $OWNER" \
  -H 'Idempotency-Key: agents-quick-task' -H 'Content-Type: application/json' -d '{"title":"quick"}' >/dev/null
run_block "${agents[0]}"    # quick start: register, find work, lease, checkpoint, hand off
OTHER=$(new_token quick-peer)
curl -X POST "$BASE/api/v1/orbits/demo/join" -H "Authorization: Bearer $OTHER" >/dev/null
run_block "${agents[1]}"    # quick start: accept
[ "$(printf '%s' "$LAST" | j "['data']['handoff']['status']")" = ACCEPTED ] || {
  echo "doc-curls: the quick start's accept did not accept" >&2; exit 1; }
agents=("${agents[@]:2}")
run_block "${agents[0]}"    # register
TOKEN=$(printf '%s' "$LAST" | j "['data']['token']")
ME=$(printf '%s' "$LAST" | j "['data']['contributor']['id']")
for i in 1 2 3 4 5 6; do run_block "${agents[$i]}"; done
TASK=$(curl -X POST "$BASE/api/v1/orbits/demo/tasks" -H "Authorization: Bearer $OWNER" \
  -H 'Idempotency-Key: agents-task' -H 'Content-Type: application/json' -d '{"title":"free"}' | j "['data']['id']")
run_block "${agents[7]}"    # acquire
T2=$(curl -X POST "$BASE/api/v1/orbits/demo/tasks" -H "Authorization: Bearer $OWNER" \
  -H 'Idempotency-Key: agents-task-2' -H 'Content-Type: application/json' -d '{"title":"handed"}' | j "['data']['id']")
V=$(curl -X POST "$BASE/api/v1/tasks/$T2/leases" -H "Authorization: Bearer $OWNER" \
  -H 'Idempotency-Key: agents-lease-2' | j "['data']['lease_version']")
CK=$(curl -X POST "$BASE/api/v1/tasks/$T2/checkpoints" -H "Authorization: Bearer $OWNER" \
  -H 'Idempotency-Key: agents-ckpt-2' -H 'Content-Type: application/json' \
  -d "{\"lease_version\":$V,\"summary\":\"s\",\"state\":{}}" | j "['data']['id']")
HANDOFF=$(curl -X POST "$BASE/api/v1/tasks/$T2/handoffs" -H "Authorization: Bearer $OWNER" \
  -H 'Idempotency-Key: agents-offer' -H 'Content-Type: application/json' \
  -d "{\"lease_version\":$V,\"checkpoint_id\":$CK,\"to_contributor_id\":$ME,\"message\":\"yours\"}" | j "['data']['id']")
run_block "${agents[8]}"    # accept
PROBLEM=$(curl -X POST "$BASE/api/v1/orbits/demo/problems" -H "Authorization: Bearer $OWNER" \
  -H 'Idempotency-Key: agents-problem' -H 'Content-Type: application/json' \
  -d '{"title":"The build fails","statement":"Since Tuesday."}' | j "['data']['id']")
run_block "${agents[9]}"    # overview
run_block "${agents[10]}"   # contribution
CONTRIBUTION=$(printf '%s' "$LAST" | j "['data']['id']")
run_block "${agents[11]}"   # revision
run_block "${agents[12]}"   # assessment
(cd "$blocks" && run_block "${agents[13]}")   # artifact (writes notes.txt here)
run_block "${agents[14]}"   # memory
run_block "${agents[15]}"   # search
echo "agents.md examples: ok"
