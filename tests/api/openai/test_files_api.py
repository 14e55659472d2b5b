"""/v1/files over an app with a queue (fake backend): bad uploads answer OpenAI-shaped 4xx."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from tandem.api.app import build_app
from tandem.api.config import ServerConfig
from tandem.api.queue.service import QueueConfig, QueueSetup
from tests.api.fakes import FakeBackend
from tests.api.openai.test_upload import BOUNDARY, multipart

MAX_FILE_BYTES = 2000


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    setup = QueueSetup(QueueConfig(target=str(tmp_path_factory.mktemp("q") / "queue.db"),
                                   max_file_bytes=MAX_FILE_BYTES), headroom=lambda: False)
    with TestClient(build_app(FakeBackend(), ServerConfig(), queue=setup),
                    raise_server_exceptions=False) as c:
        yield c


def post(client, body: bytes, content_type: str = f"multipart/form-data; boundary={BOUNDARY}"):
    return client.post("/v1/files", content=body, headers={"content-type": content_type})


def test_a_file_at_the_limit_is_stored(client):
    r = post(client, multipart(b"x" * MAX_FILE_BYTES))
    assert r.status_code == 200 and r.json()["bytes"] == MAX_FILE_BYTES, r.text


def test_a_file_over_the_limit_is_413_naming_the_limit(client):
    r = post(client, multipart(b"x" * (MAX_FILE_BYTES + 1)))
    assert r.status_code == 413
    err = r.json()["error"]
    assert err["code"] == "request_too_large" and err["param"] == "file"
    assert f"{MAX_FILE_BYTES} bytes" in err["message"] and "--max-file-bytes" in err["message"]


@pytest.mark.parametrize("content_type, body", [
    ("multipart/form-data", multipart(b"x")),
    (f"multipart/form-data; boundary={BOUNDARY}", b"garbage"),
    ("application/json", b"{}"),
])
def test_a_malformed_upload_is_400(client, content_type, body):
    r = post(client, body, content_type)
    assert r.status_code == 400 and r.json()["error"]["param"] == "file", r.text


@pytest.mark.parametrize("body, param", [
    (multipart(b"x", purpose=b"nope"), "purpose"),
    (multipart(b"\xff\xfe"), "file"),
])
def test_a_bad_purpose_or_content_is_400(client, body, param):
    r = post(client, body)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
