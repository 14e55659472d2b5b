"""Issue #30 item 1 end to end: accounts and tokens with real processes on free 127.0.0.1 ports
(tiny model). `tandem accounts` makes the first operator token in the queue's SQLite file before
the gateway starts; the gateway (--accounts, --queue-db, one worker) serves the admin API to that
token, which creates two accounts and their tokens; each account's token runs the OpenAI,
Anthropic and Workers AI routes as that account (the account reaches the worker as the tenant),
another account's Workers AI path is 403 in Cloudflare's envelope, and a revocation through the
CLI reaches the running gateway within its --token-cache-ttl.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tandem import cluster_secret
from tandem.launcher.cluster import LocalCluster, ProcSpec, free_port, gateway_proc, worker_proc

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
SECRET = "accounts-e2e-cluster-secret"
TTL_S = 1.0
CHAT = {"model": "m", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 3,
        "ignore_eos": True}


def bearer(token: str) -> dict:
    return {"authorization": f"Bearer {token}"}


def accounts_cli(db: Path, *argv: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-m", "tandem.cli", "accounts", *argv, "--queue-db", str(db)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_accounts_and_tokens_on_a_real_gateway(llama_dir, tmp_path):
    db = tmp_path / "queue.db"
    assert accounts_cli(db, "create", "Operators", "--id", "ops") == "ops"
    operator = bearer(accounts_cli(db, "token-create", "ops", "--name", "root", "--scope", "admin"))
    gport, wport = free_port(), free_port()
    gw = f"http://127.0.0.1:{gport}"
    w = worker_proc("w0", str(llama_dir), "both", "127.0.0.1", wport, None,
                    ("--kv-cache-memory=16MiB", "--dtype=float32", "--served-model-name=m"))
    g = gateway_proc(str(llama_dir), "127.0.0.1", gport, [w], "default",
                     ("--served-model-name", "m", "--accounts", "--queue-db", str(db),
                      "--token-cache-ttl", str(TTL_S)))
    c = LocalCluster([w, ProcSpec("gateway", g.cmd, g.url, None)], cluster_secret=SECRET)
    try:
        c.start()
        c.wait_ready(180)     # the worker healthy, the gateway seeing it (through the secret)

        # the operator (the CLI's token) manages accounts over the admin API
        for acc in ("acc-a", "acc-b"):
            r = httpx.post(gw + "/admin/accounts", headers=operator, json={"name": acc, "id": acc}, timeout=10)
            assert r.status_code == 200, r.text
        tokens = {}
        for acc in ("acc-a", "acc-b"):
            r = httpx.post(gw + f"/admin/accounts/{acc}/tokens", headers=operator,
                           json={"name": "app", "scopes": ["ai:run", "ai:batch"]}, timeout=10)
            tokens[acc] = r.json()["token"]
        a = bearer(tokens["acc-a"])

        r = httpx.post(gw + "/v1/chat/completions", headers=a, json=CHAT, timeout=120)
        assert r.status_code == 200, r.text
        r = httpx.post(gw + "/v1/messages", headers={"x-api-key": tokens["acc-a"]}, timeout=120,
                       json={"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "Hi"}]})
        assert r.status_code == 200 and r.json()["type"] == "message", r.text
        run = "/client/v4/accounts/{}/ai/run/@cf/test/m"
        r = httpx.post(gw + run.format("acc-a"), headers=a, json={"prompt": "Hi", "max_tokens": 3}, timeout=120)
        assert r.status_code == 200 and r.json()["success"] is True, r.text
        r = httpx.post(gw + run.format("acc-b"), headers=a, json={"prompt": "Hi", "max_tokens": 3}, timeout=30)
        assert r.status_code == 403 and r.json()["success"] is False
        assert r.json()["errors"][0]["code"] == 10000
        # a tenant's token opens neither /admin nor /internal; the operator's no model route
        assert httpx.get(gw + "/admin/accounts", headers=a, timeout=10).status_code == 403
        assert httpx.get(gw + "/internal/workers", headers=a, timeout=10).status_code == 403
        assert httpx.post(gw + "/v1/chat/completions", headers=operator, json=CHAT, timeout=30).status_code == 403
        # each account's files are its own
        up = httpx.post(gw + "/v1/files", headers=a, data={"purpose": "batch"}, timeout=30,
                        files={"file": ("in.jsonl", b'{"custom_id": "c", "body": {}}\n')})
        assert up.status_code == 200, up.text
        assert httpx.get(gw + "/v1/files", headers=bearer(tokens["acc-b"]), timeout=10).json()["data"] == []
        assert httpx.get(gw + f"/v1/files/{up.json()['id']}", headers=bearer(tokens["acc-b"]),
                         timeout=10).status_code == 404

        # revoked through the CLI: the running gateway refuses it within its TTL
        listed = accounts_cli(db, "token-list", "acc-a")
        token_id = tokens["acc-a"].split("_")[1]
        assert token_id in listed
        accounts_cli(db, "token-revoke", "acc-a", token_id)
        revoked_at = time.monotonic()
        while (r := httpx.post(gw + "/v1/chat/completions", headers=a, json=CHAT, timeout=60)).status_code == 200:
            assert time.monotonic() - revoked_at < TTL_S + 2.0, "the revocation never took effect"
            time.sleep(0.2)
        assert r.status_code == 401 and "revoked" in r.json()["error"]["message"]
        assert httpx.post(gw + "/v1/chat/completions", headers=bearer(tokens["acc-b"]), json=CHAT,
                          timeout=120).status_code == 200
        assert httpx.get(gw + "/internal/workers", headers=cluster_secret.headers(SECRET),
                         timeout=10).status_code == 200
    finally:
        c.stop()

