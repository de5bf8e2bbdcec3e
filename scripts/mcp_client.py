"""Drives Orbit Commons' MCP endpoint with the official `mcp` Python SDK as a real
client (issue 24): lists the tools, runs one lease -> checkpoint -> handoff -> accept
story between two agents, and checks that a bad token's 401 reaches the SDK with our
message. Run by scripts/mcp-python.sh, which starts the service and pins the SDK.

    python mcp_client.py BASE_URL
"""

import asyncio
import json
import sys
import urllib.request
import uuid

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

BASE = sys.argv[1].rstrip("/")


def rest(method, path, body=None, token=None):
    """A REST call (registration and setup only: the story itself is MCP)."""
    req = urllib.request.Request(BASE + path, method=method)
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    data = json.dumps(body).encode() if body is not None else None
    with urllib.request.urlopen(req, data) as resp:
        return json.loads(resp.read() or b"null")


def register(name):
    out = rest("POST", "/api/v1/contributors", {"type": "AGENT", "name": name})
    return out["data"]["token"], out["data"]["contributor"]["id"]


def client(token):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return Client(streamable_http_client(f"{BASE}/mcp", http_client=http))


def ok(result, what):
    """The structured content of a successful tool result."""
    if result.is_error:
        raise SystemExit(f"{what}: refused: {result.structured_content or result.content}")
    return result.structured_content


def key():
    return str(uuid.uuid4())


async def main():
    giver_token, _ = register("py-giver")
    taker_token, taker_id = register("py-taker")
    slug = f"py-{uuid.uuid4().hex[:8]}"

    async with client(giver_token) as giver, client(taker_token) as taker:
        tools = await giver.list_tools()
        names = sorted(t.name for t in tools.tools)
        print(f"tools/list: {len(names)} tools")
        for needed in ["create_orbit", "acquire_lease", "write_checkpoint", "offer_handoff",
                       "accept_handoff", "get_checkpoint", "get_lease", "cancel_task"]:
            assert needed in names, f"missing tool {needed}: {names}"

        ok(await giver.call_tool("create_orbit", {"slug": slug, "name": "Python SDK story",
                                                  "idempotency_key": key()}), "create_orbit")
        ok(await taker.call_tool("join_orbit", {"orbit": slug}), "join_orbit")
        task = ok(await giver.call_tool("create_task", {"orbit": slug, "title": "story",
                                                        "idempotency_key": key()}), "create_task")
        task_id = task["data"]["id"]

        lease = ok(await giver.call_tool("acquire_lease", {"task_id": task_id,
                                                           "idempotency_key": key()}), "acquire")
        version = lease["data"]["lease_version"]
        ckpt = ok(await giver.call_tool("write_checkpoint", {
            "task_id": task_id, "lease_version": version, "summary": "half done",
            "state": {"step": 1}, "idempotency_key": key()}), "write_checkpoint")
        ckpt_id = ckpt["data"]["id"]
        offer = ok(await giver.call_tool("offer_handoff", {
            "task_id": task_id, "lease_version": version, "checkpoint_id": ckpt_id,
            "to_contributor_id": taker_id, "message": "please finish",
            "idempotency_key": key()}), "offer_handoff")
        handoff_id = offer["data"]["id"]

        # The giver is fenced while the handoff is pending: a tool refusal with recover.
        fenced = await giver.call_tool("write_checkpoint", {
            "task_id": task_id, "lease_version": version, "summary": "more",
            "state": {}, "idempotency_key": key()})
        assert fenced.is_error, fenced
        assert fenced.structured_content["code"] == "handed_off", fenced.structured_content
        assert fenced.structured_content["recover"] == "stop_and_report"

        accept_key = key()
        accepted = ok(await taker.call_tool("accept_handoff", {
            "handoff_id": handoff_id, "idempotency_key": accept_key}), "accept_handoff")
        new_lease = accepted["data"]["lease"]
        assert new_lease["lease_version"] == version + 1, new_lease

        # Lost the accept's answer and the key: a new key says the task is already ours.
        again = await taker.call_tool("accept_handoff", {"handoff_id": handoff_id,
                                                         "idempotency_key": key()})
        assert again.is_error, again
        sc = again.structured_content
        assert sc["code"] == "handoff_not_pending", sc
        assert sc["recover"] == "continue", sc
        assert sc["details"]["accepted_by"] == taker_id, sc
        assert sc["details"]["lease_id"] == new_lease["id"], sc

        resumed = ok(await taker.call_tool("get_checkpoint", {"checkpoint_id": ckpt_id}),
                     "get_checkpoint")
        assert resumed["data"]["state"] == {"step": 1}, resumed
        ok(await taker.call_tool("write_checkpoint", {
            "task_id": task_id, "lease_version": new_lease["lease_version"],
            "summary": "resumed", "state": {"step": 2}, "idempotency_key": key()}),
            "write_checkpoint (taker)")
        ok(await taker.call_tool("complete_task", {
            "task_id": task_id, "lease_version": new_lease["lease_version"],
            "summary": "done", "idempotency_key": key()}), "complete_task")

        # The old lease reads as ended (what a replayed acquire's caller checks).
        old = ok(await giver.call_tool("get_lease", {"lease_id": lease["data"]["id"]}),
                 "get_lease")
        assert old["data"]["is_active"] is False, old
        assert old["data"]["end_reason"] == "HANDED_OFF", old

        # Over MCP the key error names the argument, not the header.
        missing = await giver.call_tool("create_task", {"orbit": slug, "title": "no key"})
        assert missing.is_error and missing.structured_content["code"] == "idempotency_key_required"
        text = missing.structured_content["message"]
        assert "idempotency_key" in text and "Idempotency-Key" not in text, text
        print("story: lease -> checkpoint -> handoff -> accept -> complete: ok")

    # A bad token: HTTP 401, and the SDK shows our message (not a generic -32603).
    try:
        async with client("occ_not_a_real_token") as bad:
            await bad.list_tools()
    except Exception as e:  # the SDK raises its McpError with the server's error
        while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
            e = e.exceptions[0]
        shown = str(e)
        err = getattr(e, "error", None)
        code = getattr(err, "code", None)
        print(f"bad token: {type(e).__name__}: {shown} (code {code})")
        assert "Bearer" in shown or "token" in shown.lower(), shown
        assert code != -32603, f"generic internal error: {shown}"
    else:
        raise SystemExit("a bad token was accepted")
    print("mcp-python: ok")


asyncio.run(main())
