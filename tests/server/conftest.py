import pytest
from starlette.testclient import TestClient

from tests.server.fakes import FakeBackend
from tandem.server.app import build_app
from tandem.server.config import ServerConfig


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend()


@pytest.fixture
def client(backend):
    with TestClient(build_app(backend, ServerConfig(max_body_bytes=4096))) as c:
        yield c
