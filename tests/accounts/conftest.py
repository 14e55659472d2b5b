"""Each store test runs on every backend the queue has (a SQLite file, a real Redis, a real
PostgreSQL: the queue's session servers, tests/asyncq/conftest.py), each on a fresh, empty store
(`store_target` is what `open_account_store` takes)."""

from __future__ import annotations

import os
import uuid

import pytest

from tests.asyncq import servers
from tests.asyncq.conftest import postgres_server, redis_server  # noqa: F401  (fixtures)

BACKENDS = ("sqlite", "redis", "postgres")


@pytest.fixture(params=BACKENDS)
def store_target(request, tmp_path) -> str:
    if request.param == "sqlite":
        return os.path.join(tmp_path, "queue.db")
    if request.param == "redis":
        import redis

        server = request.getfixturevalue("redis_server")
        redis.Redis.from_url(server.url).flushdb()
        return server.url
    server = request.getfixturevalue("postgres_server")
    return servers.fresh_postgres_db(server.url, "t" + uuid.uuid4().hex[:12])
