import pytest
from starlette.testclient import TestClient

from tests.api.fakes import FakeBackend
from tandem.api.app import build_app
from tandem.api.config import ServerConfig


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend()


@pytest.fixture
def client(backend):
    with TestClient(build_app(backend, ServerConfig(max_body_bytes=4096))) as c:
        yield c
