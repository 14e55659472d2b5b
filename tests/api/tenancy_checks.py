"""Two tenants (two API keys, or two accounts' tokens) against one app: every route that takes an id answers tenant B for
tenant A's object exactly as for an id that never existed (404, same body), lists hold only the
caller's own, and B's calls change nothing of A's. Run over an in-process app
(tests/api/test_tenancy.py) and over real processes (tests/e2e/test_tenancy_e2e.py): `client`
is an httpx.Client (a Starlette TestClient is one)."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass

import httpx

ACCOUNT = "acc1"


def subs_path(account: str = ACCOUNT) -> str:
    return f"/client/v4/accounts/{account}/event_subscriptions/subscriptions"


SUBS = subs_path()


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def queued_url(model: str, account: str = ACCOUNT) -> str:
    return f"/client/v4/accounts/{account}/ai/run/@cf/test/{model}?queueRequest=true"


def assert_unknown(got: httpx.Response, unknown: httpx.Response, real_id: str, fake_id: str) -> None:
    """`got` (B asking for A's `real_id`) is the 404 of an id that never existed, word for word."""
    assert got.status_code == 404 == unknown.status_code, (got.status_code, got.text)
    assert got.text.replace(real_id, fake_id) == unknown.text, (got.text, unknown.text)


@dataclass
class Owned:
    """What tenant A created (for the caller's further checks)."""
    file_id: str
    batch_id: str
    response_id: str
    request_id: str          # Workers AI queued request
    b_request_id: str        # B's, queued with the same Idempotency-Key
    subscription_id: str
    b_subscription_id: str


def check_every_route_is_owned(client: httpx.Client, a: dict, b: dict, model: str,
                               hook_a: str, hook_b: str, timeout_s: float = 120.0,
                               accounts: tuple[str, str] = (ACCOUNT, ACCOUNT)) -> Owned:
    """a, b: the two tenants' auth headers; hook_a, hook_b: webhook URLs for their subscriptions
    (batch.queued and batch.succeeded); accounts: the account each names in Workers AI paths (one
    for two --api-key tenants; each its own for account tokens, which open only their own)."""
    subs_a, subs_b = subs_path(accounts[0]), subs_path(accounts[1])
    # --- files ----------------------------------------------------------------------------
    line = {"custom_id": "c0", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": model, "max_tokens": 3, "temperature": 0,
                     "messages": [{"role": "user", "content": "hello"}]}}
    r = client.post("/v1/files", headers=a, data={"purpose": "batch"},
                    files={"file": ("in.jsonl", (json.dumps(line) + "\n").encode())})
    assert r.status_code == 200, r.text
    file_id = r.json()["id"]
    fake_file = "file-" + uuid.uuid4().hex
    for method, path in (("GET", "/v1/files/{}"), ("GET", "/v1/files/{}/content"),
                         ("DELETE", "/v1/files/{}")):
        assert_unknown(client.request(method, path.format(file_id), headers=b),
                       client.request(method, path.format(fake_file), headers=b), file_id, fake_file)
    assert client.get("/v1/files", headers=b).json()["data"] == []
    assert [f["id"] for f in client.get("/v1/files", headers=a).json()["data"]] == [file_id]
    # B cannot run a batch over A's file
    create = {"endpoint": "/v1/chat/completions", "completion_window": "24h"}
    assert_unknown(client.post("/v1/batches", headers=b, json={**create, "input_file_id": file_id}),
                   client.post("/v1/batches", headers=b, json={**create, "input_file_id": fake_file}),
                   file_id, fake_file)

    # --- batches --------------------------------------------------------------------------
    r = client.post("/v1/batches", headers=a, json={**create, "input_file_id": file_id})
    assert r.status_code == 200, r.text
    batch_id = r.json()["id"]
    fake_batch = uuid.uuid4().hex
    for method, path in (("GET", "/v1/batches/{}"), ("POST", "/v1/batches/{}/cancel")):
        assert_unknown(client.request(method, path.format(batch_id), headers=b),
                       client.request(method, path.format(fake_batch), headers=b), batch_id, fake_batch)
    assert client.get("/v1/batches", headers=b).json()["data"] == []
    assert [x["id"] for x in client.get("/v1/batches", headers=a).json()["data"]] == [batch_id]

    # --- stored responses -----------------------------------------------------------------
    r = client.post("/v1/responses", headers=a, json={"model": model, "input": "hi",
                                                     "max_output_tokens": 3, "temperature": 0})
    assert r.status_code == 200, r.text
    response_id = r.json()["id"]
    fake_resp = "resp_" + uuid.uuid4().hex
    for method in ("GET", "DELETE"):
        assert_unknown(client.request(method, f"/v1/responses/{response_id}", headers=b),
                       client.request(method, f"/v1/responses/{fake_resp}", headers=b),
                       response_id, fake_resp)
    follow = {"model": model, "input": "and then?", "max_output_tokens": 3, "temperature": 0}
    assert_unknown(client.post("/v1/responses", headers=b, json={**follow, "previous_response_id": response_id}),
                   client.post("/v1/responses", headers=b, json={**follow, "previous_response_id": fake_resp}),
                   response_id, fake_resp)
    assert client.get(f"/v1/responses/{response_id}", headers=a).json()["id"] == response_id
    r = client.post("/v1/responses", headers=a, json={**follow, "previous_response_id": response_id})
    assert r.status_code == 200, r.text

    # --- event subscriptions --------------------------------------------------------------
    events = ["batch.queued", "batch.succeeded"]
    sub_a = client.post(subs_a, headers=a, json={"url": hook_a, "events": events}).json()["result"]["id"]
    sub_b = client.post(subs_b, headers=b, json={"url": hook_b, "events": events}).json()["result"]["id"]
    assert [s["id"] for s in client.get(subs_a, headers=a).json()["result"]] == [sub_a]
    assert [s["id"] for s in client.get(subs_b, headers=b).json()["result"]] == [sub_b]
    fake_sub = uuid.uuid4().hex
    for method, path in (("DELETE", subs_b + "/{}"), ("GET", subs_b + "/{}/dead_letters")):
        assert_unknown(client.request(method, path.format(sub_a), headers=b),
                       client.request(method, path.format(fake_sub), headers=b), sub_a, fake_sub)
    assert [s["id"] for s in client.get(subs_a, headers=a).json()["result"]] == [sub_a]   # not deleted

    # --- Workers AI queued requests (after the subscriptions: their events are posted) ----
    url, url_b = queued_url(model, accounts[0]), queued_url(model, accounts[1])
    body = {"requests": [{"prompt": "hi", "max_tokens": 3, "temperature": 0}]}
    key = {"Idempotency-Key": "same-key"}
    request_id = client.post(url, headers={**a, **key}, json=body).json()["result"]["request_id"]
    b_request_id = client.post(url_b, headers={**b, **key}, json=body).json()["result"]["request_id"]
    assert b_request_id != request_id     # the key is per tenant: B's enqueue is B's own batch
    fake_rid = uuid.uuid4().hex
    assert_unknown(client.post(url_b, headers=b, json={"request_id": request_id}),
                   client.post(url_b, headers=b, json={"request_id": fake_rid}), request_id, fake_rid)
    stream = f"/client/v4/accounts/{accounts[1]}/ai/batches/{{}}/events"
    assert_unknown(client.get(stream.format(request_id), headers=b),
                   client.get(stream.format(fake_rid), headers=b), request_id, fake_rid)
    # nor is A's OpenAI batch a queued request of B's (or A's batch id under B's account path)
    assert_unknown(client.post(url_b, headers=b, json={"request_id": batch_id}),
                   client.post(url_b, headers=b, json={"request_id": fake_rid}), batch_id, fake_rid)

    # --- A's work ends; B's cancel above changed nothing; its output is A's alone ----------
    deadline = time.monotonic() + timeout_s
    while (batch := client.get(f"/v1/batches/{batch_id}", headers=a).json())["status"] != "completed":
        assert batch["status"] == "in_progress", batch
        assert time.monotonic() < deadline, f"batch not done: {batch}"
        time.sleep(0.1)
    assert batch["request_counts"] == {"total": 1, "completed": 1, "failed": 0}
    out = batch["output_file_id"]
    fake_out = f"file-{fake_batch}-output"
    for path in ("/v1/files/{}", "/v1/files/{}/content"):
        assert_unknown(client.get(path.format(out), headers=b), client.get(path.format(fake_out), headers=b),
                       out, fake_out)
    (result,) = [json.loads(x) for x in client.get(f"/v1/files/{out}/content", headers=a).text.splitlines()]
    assert result["custom_id"] == "c0" and result["response"]["status_code"] == 200
    for rid, tenant, its_url in ((request_id, a, url), (b_request_id, b, url_b)):
        while "responses" not in (res := client.post(its_url, headers=tenant, json={"request_id": rid}).json()["result"]):
            assert time.monotonic() < deadline, f"queued request not done: {res}"
            time.sleep(0.1)
        assert res["responses"][0]["success"] is True
    assert client.delete(f"/v1/responses/{response_id}", headers=a).status_code == 200
    assert client.delete(f"/v1/files/{file_id}", headers=a).status_code == 200
    return Owned(file_id, batch_id, response_id, request_id, b_request_id, sub_a, sub_b)


def posted_events(posts) -> list[tuple[str, str, str]]:
    """(subscription id, request id, event type) of each webhook post a receiver got."""
    out = []
    for p in posts:
        e = json.loads(p.body)
        out.append((e["metadata"]["eventSubscriptionId"], e["payload"]["requestId"], e["type"]))
    return out
