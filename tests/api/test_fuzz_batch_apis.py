"""Random requests to the Files and Batch routes over an app with a queue (fake backend): every
answer is a 200 or a 4xx in OpenAI's error shape, never a 500 (issue #30 found a list `endpoint`
and a multipart body without boundary answering 500). Derandomized, so every run sees the same
examples."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from tandem.api.app import build_app
from tandem.api.config import ServerConfig
from tandem.api.queue.service import QueueConfig, QueueSetup
from tests.api.fakes import FakeBackend

FUZZ = settings(derandomize=True, deadline=None, max_examples=100,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

any_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6)


def mostly(valid: st.SearchStrategy) -> st.SearchStrategy:
    """`valid` 9 times in 10, anything at all otherwise."""
    return st.integers(0, 9).flatmap(lambda i: any_json if i == 0 else valid)


URL = mostly(st.sampled_from(["/v1/chat/completions", "/v1/completions", "/v1/embeddings"]))
LINE = st.fixed_dictionaries({"custom_id": mostly(st.text(max_size=4)), "url": URL,
                              "body": mostly(st.just({"model": "fake-model", "prompt": "x"}))},
                             optional={"method": mostly(st.just("POST"))})
JSONL = st.lists(mostly(LINE), max_size=4).map(
    lambda lines: "".join(json.dumps(line) + "\n" for line in lines).encode())
CONTENT = JSONL | st.binary(max_size=64)
BOUNDARY = "fuzzb"
PART_NAME = st.sampled_from(["file", "purpose", "other", ""])


def _part(name: str, value: bytes, filename: str | None) -> bytes:
    disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename is not None else "")
    return f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + value + b"\r\n"


PARTS = st.lists(st.tuples(PART_NAME, CONTENT | st.sampled_from([b"batch", b"nope"]),
                           st.none() | st.text(max_size=5)), max_size=3)
MULTIPART = PARTS.map(lambda parts: b"".join(_part(*p) for p in parts) + f"--{BOUNDARY}--\r\n".encode())
CONTENT_TYPE = st.sampled_from([f"multipart/form-data; boundary={BOUNDARY}", "multipart/form-data",
                                "multipart/form-data; boundary=", "multipart/form-data; boundary=other",
                                "application/json", "text/plain", ""])
UPLOAD = st.tuples(CONTENT_TYPE, MULTIPART | st.binary(max_size=64))


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    setup = QueueSetup(QueueConfig(target=str(tmp_path_factory.mktemp("q") / "queue.db"),
                                   max_file_bytes=256), headroom=lambda: False)
    with TestClient(build_app(FakeBackend(), ServerConfig(), queue=setup)) as c:
        yield c


def check(r) -> None:
    assert r.status_code == 200 or 400 <= r.status_code < 500, (r.status_code, r.text[:300])
    if r.status_code != 200:
        err = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["message"], err


@FUZZ
@given(upload=UPLOAD)
def test_uploads_never_500(client, upload):
    content_type, body = upload
    check(client.post("/v1/files", content=body,
                      headers={"content-type": content_type} if content_type else {}))


@FUZZ
@given(content=JSONL, fields=st.fixed_dictionaries({}, optional={
    "endpoint": URL, "completion_window": mostly(st.just("24h")),
    "metadata": mostly(st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2)),
    "input_file_id": any_json}), use_upload=st.booleans())
def test_batch_creation_never_500s(client, content, fields, use_upload):
    body = dict(fields)
    if use_upload:
        up = client.post("/v1/files", files={"file": ("in.jsonl", content)}, data={"purpose": "batch"})
        check(up)
        if up.status_code == 200:
            body["input_file_id"] = up.json()["id"]
    r = client.post("/v1/batches", content=json.dumps(body))   # NaN/inf too
    check(r)
    if r.status_code == 200:
        batch_id = r.json()["id"]
        for path in (f"/v1/batches/{batch_id}", "/v1/batches"):
            check(client.get(path))
        check(client.post(f"/v1/batches/{batch_id}/cancel"))


@FUZZ
@given(name=st.text(max_size=12), limit=st.none() | st.text(max_size=4), after=st.none() | st.text(max_size=6))
def test_lookups_never_500(client, name, limit, after):
    params = {k: v for k, v in (("limit", limit), ("after", after)) if v is not None}
    check(client.get("/v1/batches", params=params))
    check(client.get("/v1/files", params={"purpose": name}))
    for method, path in (("GET", "/v1/files/{}"), ("GET", "/v1/files/{}/content"), ("DELETE", "/v1/files/{}"),
                         ("GET", "/v1/batches/{}"), ("POST", "/v1/batches/{}/cancel")):
        check(client.request(method, path.format(quote(name, safe="") or "x")))
