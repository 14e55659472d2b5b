"""A Mooncake Store call that gets no answer (its master or peer host vanished: nothing refuses)
fails within the tier's call timeout instead of Mooncake's 10-30 s, and the tier takes no call
until the stuck one has returned (it may still write into the staging buffers) and the master
accepts connections again."""

import socket
import threading
import time

from tandem.kvstore.mooncake_store import MooncakeStoreTier


class StuckClient:
    def __init__(self):
        self.release = threading.Event()
        self.calls = 0

    def batch_is_exist(self, keys):
        self.calls += 1
        self.release.wait(10)
        return [1] * len(keys)


def offline_tier(master: socket.socket, **kw) -> MooncakeStoreTier:
    """A tier whose connector gave up (no master at 127.0.0.1:1), a fake client in its place, and
    `master` (a plain listener) where its probe looks for the master."""
    tier = MooncakeStoreTier("mooncake://127.0.0.1:1", 1 << 20, 64, batch_blocks=2, **kw)
    tier._closed = True              # the connector stops retrying
    tier._connector.join(5)
    tier._closed = False
    tier.master = master.getsockname()[:2]
    tier._down_until = 0.0
    return tier


def test_no_answer_fails_in_time_then_nothing_is_sent_until_the_call_returns():
    master = socket.create_server(("127.0.0.1", 0))
    tier = offline_tier(master, retry_s=0.2, call_timeout_s=0.2)
    client = tier._client = StuckClient()
    t0 = time.monotonic()
    assert tier.contains_many(["a", "b"]) == [False, False]
    assert time.monotonic() - t0 < 1.0
    assert not tier.available and client.calls == 1
    time.sleep(0.3)                                   # past retry_s, but the call is still out
    assert not tier.available
    assert tier.contains_many(["a"]) == [False] and client.calls == 1
    client.release.set()
    deadline = time.monotonic() + 5
    while not tier.available:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert tier.contains_many(["a"]) == [True] and client.calls == 2
    tier._client = None
    tier.close()
    master.close()
