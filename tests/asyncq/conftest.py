"""Each queue test runs on every backend: a SQLite file, a real Redis and a real PostgreSQL
(started once per session, skipped with the reason when the binary is absent), each test on a
fresh, empty store (`queue_target` is what `open_queue` takes)."""

from __future__ import annotations

import os
import uuid

import pytest

from tests.asyncq import servers

BACKENDS = ("sqlite", "redis", "postgres")


@pytest.fixture(scope="session")
def redis_server():
    server = servers.start_redis()
    if server is None:
        pytest.skip("redis-server or the redis package not found (Debian package redis-server, pip redis)")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres_server():
    server = servers.start_postgres()
    if server is None:
        pytest.skip("postgres under /usr/lib/postgresql/*/bin or psycopg not found (Debian package "
                    "postgresql, pip psycopg[binary])")
    yield server
    server.stop()


@pytest.fixture(params=BACKENDS)
def queue_target(request, tmp_path) -> str:
    if request.param == "sqlite":
        return os.path.join(tmp_path, "queue.db")
    if request.param == "redis":
        import redis

        server = request.getfixturevalue("redis_server")
        redis.Redis.from_url(server.url).flushdb()
        return server.url
    server = request.getfixturevalue("postgres_server")
    return servers.fresh_postgres_db(server.url, "t" + uuid.uuid4().hex[:12])
