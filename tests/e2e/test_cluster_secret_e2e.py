"""Issue #30 item 5 end to end: a tenant's key opens no /internal route, on the gateway or on a
worker; the cluster secret does. Real processes on free 127.0.0.1 ports, tiny model.

- `tandem up --prefill 1 --decode 1 --gateway-arg=--api-key=K` becomes ready (its probe presents
  the secret it generated), answers a chat completion with K and refuses one without; K cannot
  drain, register, list or switch anything, and the workers refuse every /internal call without
  the secret (generate included);
- a gateway with --api-key and a worker registering itself with --gateway, both given the same
  --cluster-secret-file: the worker registers, the secret opens every /internal route, K none.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import httpx
import pytest

from tandem import cluster_secret
from tandem.launcher.cluster import LocalCluster, ProcSpec, free_port, gateway_proc, worker_proc
from tandem.testing.server_process import tandem_up

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
KEY = "tenant-key-b"
WORKER_ARGS = ("--kv-cache-memory=16MiB", "--dtype=float32", "--served-model-name=m")
CHAT = {"model": "m", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 4,
        "ignore_eos": True}
GENERATE = {"request_id": "evil-1", "prompt_token_ids": [1, 2, 3],
            "sampling": {"max_tokens": 2}}


def bearer(key: str) -> dict:
    return {"authorization": f"Bearer {key}"}


def gateway_calls(worker_url: str) -> list[tuple[str, str, dict | None]]:
    return [("POST", "/internal/drain", {"url": worker_url}),
            ("POST", "/internal/deregister", {"url": worker_url}),
            ("POST", "/internal/register", {"url": "http://127.0.0.1:9", "role": "decode"}),
            ("GET", "/internal/workers", None), ("GET", "/internal/planner", None)]


WORKER_CALLS = [("POST", "/internal/generate", GENERATE), ("GET", "/internal/stats", None),
                ("GET", "/internal/kv_events?since=0", None), ("GET", "/internal/role", None),
                ("POST", "/internal/role", {"role": "both"}),
                ("POST", "/internal/kv_release", {"request_id": "x"})]


def status(method: str, url: str, body: dict | None, headers: dict) -> int:
    return httpx.request(method, url, json=body, headers=headers, timeout=30).status_code


def test_tandem_up_with_an_api_key_is_ready_and_keeps_tenants_off_internal_routes(llama_dir):
    port = free_port()
    gw = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k != cluster_secret.ENV_VAR}   # up generates one
    env["PYTHONPATH"] = str(REPO)
    lines: list[str] = []
    with tandem_up(["--model", str(llama_dir), "--prefill", "1", "--decode", "1", "--port", str(port),
                    "--ready-timeout", "180", *(f"--worker-arg={a}" for a in WORKER_ARGS),
                    "--gateway-arg=--served-model-name=m", f"--gateway-arg=--api-key={KEY}"],
                   cwd=REPO, env=env, lines=lines):
        urls = dict(re.findall(r"tandem up: (prefill|decode)-\d+ at (http://\S+)", "".join(lines)))
        prefill, decode = urls["prefill"], urls["decode"]
        r = httpx.post(gw + "/v1/chat/completions", json=CHAT, headers=bearer(KEY), timeout=120)
        assert r.status_code == 200, r.text
        assert (r.headers["x-tandem-prefill"], r.headers["x-tandem-decode"]) == (prefill, decode)
        assert httpx.post(gw + "/v1/chat/completions", json=CHAT, timeout=30).status_code == 401
        assert httpx.post(gw + "/v1/chat/completions", json=CHAT, headers=bearer("nope"),
                          timeout=30).status_code == 401
        for method, path, body in gateway_calls(decode):
            assert status(method, gw + path, body, bearer(KEY)) == 403, path
            assert status(method, gw + path, body, {}) == 401, path
            assert status(method, gw + path, body, {cluster_secret.HEADER: KEY}) == 401, path
        for worker in (prefill, decode):
            for method, path, body in WORKER_CALLS:
                for headers in ({}, bearer(KEY), {cluster_secret.HEADER: "guess"}):
                    assert status(method, worker + path, body, headers) == 401, (worker, path, headers)
        # nothing the tenant tried took effect: the decode worker still serves, in its role
        r = httpx.post(gw + "/v1/chat/completions", json=CHAT, headers=bearer(KEY), timeout=120)
        assert r.status_code == 200 and r.headers["x-tandem-decode"] == decode


def test_registered_worker_and_gateway_share_the_secret_file(llama_dir, tmp_path):
    secret = "e2e-" + os.urandom(16).hex()
    secret_file = tmp_path / "cluster-secret"
    secret_file.write_text(secret + "\n")
    secret_file.chmod(0o600)
    gport, wport = free_port(), free_port()
    gw = f"http://127.0.0.1:{gport}"
    g = gateway_proc(str(llama_dir), "127.0.0.1", gport, [], "default",
                     ("--served-model-name", "m", "--poll-interval", "0.2", "--api-key", KEY,
                      "--cluster-secret-file", str(secret_file)))
    w = worker_proc("w0", str(llama_dir), "both", "127.0.0.1", wport, None,
                    (*WORKER_ARGS, "--gateway", gw, "--api-key", KEY,
                     "--cluster-secret-file", str(secret_file)))
    # no TANDEM_CLUSTER_SECRET in their environment (cluster_secret=None): the file is the only source
    c = LocalCluster([ProcSpec("gateway", g.cmd, g.url, None), w])
    ours = {cluster_secret.HEADER: secret}
    try:
        c.start()
        deadline = time.monotonic() + 180
        while True:
            c.check_alive()
            try:
                ws = httpx.get(gw + "/internal/workers", headers=ours, timeout=5).json()["workers"]
                if ws and ws[0]["healthy"]:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the worker never registered"
            time.sleep(0.3)
        assert ws[0]["url"] == w.url and ws[0]["static"] is False
        r = httpx.post(gw + "/v1/chat/completions", json=CHAT, headers=bearer(KEY), timeout=120)
        assert r.status_code == 200 and r.headers["x-tandem-decode"] == w.url
        for method, path, body in gateway_calls(w.url):
            assert status(method, gw + path, body, bearer(KEY)) == 403, path
            assert status(method, gw + path, body, {}) == 401, path
        for method, path, body in WORKER_CALLS[:4]:
            assert status(method, w.url + path, body, bearer(KEY)) == 403, path   # a tenant key here too
            assert status(method, w.url + path, body, {}) == 401, path
        assert status("GET", w.url + "/internal/stats", None, ours) == 200
        assert status("GET", w.url + "/internal/stats", None, bearer(secret)) == 200
        g_stream = httpx.post(w.url + "/internal/generate", json=GENERATE, headers=ours, timeout=60)
        assert g_stream.status_code == 200 and g_stream.text.strip().splitlines()
        # the secret drains for real: no worker left to route to
        assert httpx.post(gw + "/internal/drain", json={"url": w.url}, headers=ours,
                          timeout=10).json() == {"ok": True}
        assert httpx.post(gw + "/v1/chat/completions", json=CHAT, headers=bearer(KEY),
                          timeout=30).status_code == 503
    finally:
        c.stop()
