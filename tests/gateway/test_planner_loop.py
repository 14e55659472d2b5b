import math

import pytest
from prometheus_client import CollectorRegistry, Histogram

from tandem.gateway.config import RegistryConfig
from tandem.gateway.planner_loop import PlannerLoop, reading
from tandem.gateway.registry import Registry
from tandem.planner.policy import SWITCH_KINDS, PlannerConfig, RoleSwitch
from tandem.router.load_tracker import LoadTracker


def setup(cfg=PlannerConfig(slo_ttft_ms=1000, slo_itl_ms=100, min_samples=4, cooldown_s=60)):
    prom = CollectorRegistry()
    ttft = Histogram("ttft", "", ("model_name",), buckets=(0.5, 1.0, 2.0), registry=prom)
    itl = Histogram("itl", "", ("model_name",), buckets=(0.05, 0.1), registry=prom)
    reg = Registry(RegistryConfig())
    for url, role in (("http://p0", "prefill"), ("http://d0", "decode"), ("http://d1", "decode")):
        reg.add_static(url, role)
        reg.poll_ok(url, {"role": role}, 0.0)
    clock = [0.0]
    loop = PlannerLoop(cfg, ttft, itl, reg, LoadTracker(), prom, clock=lambda: clock[0])
    return loop, ttft, itl, clock, prom


def test_reading_sums_label_sets():
    loop, ttft, itl, clock, prom = setup()
    ttft.labels("a").observe(0.7)
    ttft.labels("b").observe(1.5)
    assert reading(ttft) == ((0.5, 0.0), (1.0, 1.0), (2.0, 2.0), (math.inf, 2.0))


def test_a_round_measures_only_its_own_window_and_publishes_one_switch():
    loop, ttft, itl, clock, prom = setup()
    for _ in range(4):                  # observed after the loop was built: in its first round
        ttft.labels("m").observe(1.5)
        itl.labels("m").observe(0.02)
    sw = loop.round()
    # p90 of 4 samples in (1, 2]: 1 + 1 * 3.6 / 4; in (0, 0.05]: 0.05 * 3.6 / 4
    m = loop.measured
    assert (m.ttft_p90_ms, m.itl_p90_ms) == pytest.approx((1900.0, 45.0))
    assert (m.ttft_samples, m.itl_samples) == (4, 4)
    assert sw == RoleSwitch("http://d0", "decode", "both", "ttft") and loop.seq == 1
    state = loop.state()
    assert state["seq"] == 1 and state["switch"]["to_role"] == "both" and state["enabled"]
    assert prom.get_sample_value("tandem:gateway_planner_switches_total",
                                 {"from_role": "decode", "to_role": "both", "reason": "ttft"}) == 1
    # next round: nothing new observed, and the cooldown holds anyway
    clock[0] = 10.0
    assert loop.round() is None and loop.measured.ttft_samples == 0 and loop.seq == 1


def test_every_switch_kind_is_exported_from_zero_before_any_switch():
    loop, ttft, itl, clock, prom = setup()
    for frm, to, reason in SWITCH_KINDS:
        assert prom.get_sample_value("tandem:gateway_planner_switches_total",
                                     {"from_role": frm, "to_role": to, "reason": reason}) == 0
    assert len(SWITCH_KINDS) == len(set(SWITCH_KINDS)) == 6

