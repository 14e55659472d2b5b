from tandem.gateway.config import RegistryConfig
from tandem.gateway.queue_headroom import has_headroom
from tandem.gateway.registry import Registry
from tandem.router.load_tracker import LoadTracker


def worker(reg: Registry, url: str, role: str, waiting: int = 0) -> str:
    reg.add_static(url, role)
    reg.poll_ok(reg.get(url).url, {"role": role, "num_waiting": waiting}, now=0.0)
    return reg.get(url).url


def test_colocated_pool_headroom_follows_prefill_tokens_and_waiting():
    reg, tracker = Registry(RegistryConfig()), LoadTracker()
    assert not has_headroom(reg, tracker, 100)            # no worker at all
    a = worker(reg, "http://a", "both")
    assert has_headroom(reg, tracker, 100)
    tracker.dispatch("r1", a, pending=150)
    assert not has_headroom(reg, tracker, 100)             # too many prompt tokens pending
    b = worker(reg, "http://b", "both", waiting=2)
    assert not has_headroom(reg, tracker, 100)             # the other one has requests waiting
    reg.poll_ok(b, {"role": "both", "num_waiting": 0}, now=1.0)
    assert has_headroom(reg, tracker, 100)
    reg.drain(b)
    assert not has_headroom(reg, tracker, 100)             # draining workers take nothing new
    tracker.finish("r1", a)
    assert has_headroom(reg, tracker, 100)


def test_disaggregated_pools_need_room_on_both_sides():
    reg, tracker = Registry(RegistryConfig()), LoadTracker()
    worker(reg, "http://p", "prefill")
    d = worker(reg, "http://d", "decode", waiting=1)
    assert not has_headroom(reg, tracker, 100)
    reg.poll_ok(d, {"role": "decode", "num_waiting": 0}, now=1.0)
    assert has_headroom(reg, tracker, 100)
