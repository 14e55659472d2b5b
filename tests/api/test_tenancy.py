"""Two API keys, two tenants, one app (fake backend, real SQLite queue, real webhook receivers):
nothing one tenant creates is visible to, or changeable by, the other (tests/api/tenancy_checks.py),
and each tenant's subscriptions get only its own batches' events and dead letters."""

from __future__ import annotations

import time

from starlette.testclient import TestClient

from tandem.api.app import build_app
from tandem.api.config import ServerConfig
from tandem.asyncq.notifier import NotifierConfig
from tandem.api.queue.service import QueueConfig, QueueSetup
from tests.asyncq.receiver import Receiver
from tests.asyncq.servers import free_port
from tests.api.fakes import FakeBackend
from tests.api.tenancy_checks import SUBS, assert_unknown, auth, check_every_route_is_owned, posted_events

KEYS = ("key-a-secret", "key-b-secret")


def test_two_tenants_never_see_each_others_objects(tmp_path):
    hook_a, hook_b = Receiver(free_port(), status=500), Receiver(free_port(), status=200)
    hook_a.start()
    hook_b.start()
    notifier = NotifierConfig(max_attempts=2, backoff_base_s=0.05, backoff_max_s=0.1, timeout_s=2.0,
                              lease_s=5.0, idle_poll_s=0.05)
    setup = QueueSetup(QueueConfig(target=str(tmp_path / "queue.db"), poll_s=0.05, lease_s=5.0,
                                   notifier=notifier), headroom=lambda: True)
    backend = FakeBackend(reply="Hi")
    a, b = auth(KEYS[0]), auth(KEYS[1])
    try:
        with TestClient(build_app(backend, ServerConfig(api_keys=KEYS), queue=setup)) as client:
            owned = check_every_route_is_owned(client, a, b, "fake-model",
                                               f"http://127.0.0.1:{hook_a.port}/a",
                                               f"http://127.0.0.1:{hook_b.port}/b", timeout_s=20)
            # A's receiver fails: A's queued request's events become A's dead letters
            deadline = time.monotonic() + 20
            while len(dead := client.get(f"{SUBS}/{owned.subscription_id}/dead_letters",
                                         headers=a).json()["result"]) < 2:
                assert time.monotonic() < deadline, dead
                time.sleep(0.05)
            assert {d["event"]["payload"]["requestId"] for d in dead} == {owned.request_id}
            fake = "0" * 32
            assert_unknown(client.get(f"{SUBS}/{owned.subscription_id}/dead_letters", headers=b),
                           client.get(f"{SUBS}/{fake}/dead_letters", headers=b), owned.subscription_id, fake)
            assert client.get(f"{SUBS}/{owned.b_subscription_id}/dead_letters", headers=b).json()["result"] == []
            # every post went to the subscription of the batch's own tenant
            assert set(posted_events(hook_a.posts)) <= {(owned.subscription_id, owned.request_id, t)
                                                        for t in ("cf.workersAi.model.batch.queued",
                                                                  "cf.workersAi.model.batch.succeeded")}
            while len(hook_b.posts) < 2:
                assert time.monotonic() < deadline, hook_b.posts
                time.sleep(0.05)
            assert {(s, r) for s, r, _ in posted_events(hook_b.posts)} == \
                {(owned.b_subscription_id, owned.b_request_id)}
            # the engine requests carried their tenant (for the cache partition)
            assert {q.context.tenant for q in backend.seen} == {"key-0", "key-1"}
            # A deletes its subscription; B's stays
            assert client.delete(f"{SUBS}/{owned.subscription_id}", headers=a).status_code == 200
            assert [s["id"] for s in client.get(SUBS, headers=b).json()["result"]] == [owned.b_subscription_id]
    finally:
        hook_a.stop()
        hook_b.stop()
