"""The fleet's capacity as the gate reads it: in PD mode, requests prefilling count against the
decode pool's room (they reach it when their prefill is done)."""

from __future__ import annotations

from tandem.gateway.admission.capacity import has_capacity
from tandem.gateway.config import RegistryConfig
from tandem.gateway.registry import Registry
from tandem.router.admission import AdmissionLimits
from tandem.router.load_tracker import LoadTracker

P, D = "http://10.0.0.1:8000", "http://10.0.0.2:8000"


class Mode:
    def __init__(self, mode: str) -> None:
        self._mode = mode

    def mode(self) -> str:
        return self._mode


def fleet() -> tuple[Registry, LoadTracker]:
    reg = Registry(RegistryConfig())
    for url, role in ((P, "prefill"), (D, "decode")):
        reg.heartbeat(url, role, now=0.0)
        reg.poll_ok(url, {"role": role, "num_waiting": 0}, now=0.0)
    return reg, LoadTracker()


def test_requests_prefilling_take_the_decode_pools_room():
    reg, tracker = fleet()
    assert all(w.healthy for w in reg.all())
    limits = AdmissionLimits(max_in_flight=2)
    assert has_capacity(Mode("pd"), reg, tracker, limits)
    tracker.dispatch("r1", P, pending=10)                 # prefilling: headed for decode
    assert has_capacity(Mode("pd"), reg, tracker, limits)
    tracker.dispatch("r2", P, pending=10)                 # two headed, decode has room for two
    assert not has_capacity(Mode("pd"), reg, tracker, limits)
    tracker.finish("r1", P)
    tracker.dispatch("r1", D, pending=0, context=10)      # r1's decode pass: one room left, r2 takes it
    assert not has_capacity(Mode("pd"), reg, tracker, limits)
    tracker.finish("r1", D)
    assert has_capacity(Mode("pd"), reg, tracker, limits)


def test_colocated_capacity_is_a_free_worker():
    reg = Registry(RegistryConfig())
    reg.heartbeat(D, "both", now=0.0)
    reg.poll_ok(D, {"role": "both", "num_waiting": 0}, now=0.0)
    tracker, limits = LoadTracker(), AdmissionLimits(max_in_flight=1)
    assert has_capacity(Mode("colocated"), reg, tracker, limits)
    tracker.dispatch("r1", D, pending=10)
    assert not has_capacity(Mode("colocated"), reg, tracker, limits)


def test_a_tenant_below_its_share_is_not_held_back_by_its_own_open_requests():
    reg = Registry(RegistryConfig())
    reg.heartbeat(D, "both", now=0.0)
    reg.poll_ok(D, {"role": "both", "num_waiting": 0}, now=0.0)
    tracker, limits = LoadTracker(), AdmissionLimits(max_in_flight=8)   # overflow 2, share 4 each
    for i in range(6):
        tracker.dispatch(f"big{i}", D, pending=10, tenant="big")
    for i in range(3):
        tracker.dispatch(f"small{i}", D, pending=10, tenant="small")
    # 9 open, over the cap: big is above its share and has no room; small (3 < 4) still has:
    # the overflow (2) plus its own three
    assert not has_capacity(Mode("colocated"), reg, tracker, limits, tenant="big")
    assert has_capacity(Mode("colocated"), reg, tracker, limits, tenant="small")
    for i in range(6, 10):
        tracker.dispatch(f"big{i}", D, pending=10, tenant="big")
    # 13 open: the cap, the overflow and small's own three are all taken
    assert not has_capacity(Mode("colocated"), reg, tracker, limits, tenant="small")
