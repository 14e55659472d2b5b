"""The usage store's tests run on every backend the queue runs on, with the queue's fixtures:
a SQLite file, a real Redis and a real PostgreSQL (skipped when the binary is absent)."""

from tests.asyncq.conftest import postgres_server, queue_target, redis_server  # noqa: F401
