"""The simulated fleet end to end on a small synthetic Mooncake-format trace."""

from dataclasses import replace

import pytest

from tandem.planner.policy import PlannerConfig
from tandem.router.policies.placement import PlacementConfig
from tandem.sim.config import SimConfig, parse_topology
from tandem.sim.fleet import Fleet, simulate
from tandem.sim.gateway import GatewayConfig
from tandem.sim.trace import load_trace


def cfg(trace, topology="colocated:2", **kw):
    return SimConfig(trace=trace, model="llama-3.1-8b", accelerator="h100", devices=1,
                     topology=parse_topology(topology), **kw)


def test_trace_sessions_and_ideal(trace_path):
    t = load_trace(trace_path)
    assert len(t.requests) == 48 and t.sessions == 12 and t.block_size == 512
    by_session = {}
    for r in t.requests:
        by_session.setdefault(r.session_id, []).append(r)
    assert all(len(v) == 4 for v in by_session.values())
    assert 0.5 < t.ideal_hit_ratio < 1.0


@pytest.mark.parametrize("topology", ["colocated:1", "colocated:3", "disagg:1p1d", "disagg:2p1d"])
@pytest.mark.parametrize("store", [False, True])
def test_no_request_lost_and_hits_never_beat_the_ideal(trace_path, topology, store):
    out = simulate(cfg(trace_path, topology, store=store))
    assert out["requests"] == 48 and out["lost"] == 0
    assert out["completed"] + out["rejected"] == 48 and out["completed"] == 48
    assert 0 < out["cache"]["hit_ratio"] <= out["cache"]["ideal_hit_ratio"]
    assert out["ttft_ms"]["p50"] > 0 and out["itl_ms"]["p50"] > 0
    if store:
        assert "store" in out["cache"]["by_tier"] or topology != "colocated:3"


def test_deterministic_with_a_seed(trace_path):
    a = simulate(cfg(trace_path, "disagg:1p1d", request_rate=4.0, seed=3))
    b = simulate(cfg(trace_path, "disagg:1p1d", request_rate=4.0, seed=3))
    c = simulate(cfg(trace_path, "disagg:1p1d", request_rate=4.0, seed=4))
    for out in (a, b, c):
        out.pop("sim")
    assert a == b
    assert a["ttft_ms"] != c["ttft_ms"]


def test_the_real_placement_policy_decides(trace_path):
    base = simulate(cfg(trace_path, "disagg:1p1d"))
    assert set(base["placement"]) <= {"no_prefill", "short", "off", "decode_busy", "idle_decode", "queue", "remote"}
    assert sum(base["placement"].values()) == 48
    local = simulate(cfg(trace_path, "disagg:1p1d",
                         gateway=GatewayConfig(PlacementConfig(always_local_tokens=10**9))))
    assert local["placement"] == {"short": 48} and local["routes"] == {"local": 48}
    off = simulate(cfg(trace_path, "disagg:1p1d", gateway=GatewayConfig(PlacementConfig(enabled=False))))
    assert off["placement"] == {"off": 48} and off["routes"] == {"remote": 48}
    assert local["itl_ms"] != off["itl_ms"]


def test_the_real_router_keeps_sessions_home(trace_path):
    out = simulate(cfg(trace_path, "colocated:3"))
    assert out["decisions"].get("both:affinity", 0) > 0
    none = simulate(cfg(trace_path, "colocated:3", gateway=GatewayConfig(affinity=False)))
    assert not any(k.endswith("affinity") for k in none["decisions"])


def test_the_planner_switches_a_worker_and_loses_nothing(trace_path):
    # up the ladder in two switches (decode -> both -> prefill), one cooldown apart
    planner = PlannerConfig(slo_ttft_ms=1.0, slo_itl_ms=10_000.0, interval_s=1.0, cooldown_s=2.0, min_samples=1)
    # requests placed by prefix and load (no session header): the sessions, all begun within the
    # first two seconds, would otherwise stay on the decode workers they started on
    out = simulate(cfg(trace_path, "disagg:1p2d", planner=planner, restart_s=1.0,
                       gateway=GatewayConfig(affinity=False)))
    # the decode worker with the fewest streams at the first round climbs both rungs
    (w1, to1), (w2, to2) = [(s["worker"], s["to"]) for s in out["planner"]]
    assert w1 == w2 and w1 in ("decode-1", "decode-2") and (to1, to2) == ("both", "prefill")
    assert out["placement"].get("both", 0) > 0       # while it was both, it served requests whole
    assert sorted(w["role"] for w in out["workers"].values()) == ["decode", "prefill", "prefill"]
    assert out["lost"] == 0 and out["completed"] == 48


def test_a_context_too_large_is_an_explicit_error(trace_path):
    out = simulate(replace(cfg(trace_path, "colocated:1"), kv_cache_gb=0.3))   # ~2.3k tokens of KV
    assert out["rejected"] > 0 and out["lost"] == 0 and out["completed"] + out["rejected"] == 48


def test_topology_parsing():
    assert parse_topology("disagg:2p3d").roles == ["prefill"] * 2 + ["decode"] * 3
    assert parse_topology("pd:1:1").roles == ["prefill", "decode"]
    assert str(parse_topology("colocated:4")) == "colocated:4"
    with pytest.raises(ValueError):
        parse_topology("disagg:0p2d")


@pytest.mark.parametrize("topology", ["colocated:2", "disagg:1p1d", "disagg:2p1d"])
def test_idle_fleet_holds_no_block(trace_path, topology):
    """Invariant: when the system is idle, every block is free or only cached (none pinned or
    live), including after requests answered by their first token (output 1: no decode pass)."""
    t = load_trace(trace_path)
    t = replace(t, requests=tuple(replace(r, output_tokens=1) if i % 3 == 0 else r
                                  for i, r in enumerate(t.requests)))
    fleet = Fleet(cfg(trace_path, topology), t)
    out = fleet.run()
    assert out["lost"] == 0 and out["completed"] == 48
    for w in fleet.workers:
        assert w.idle() and w.cache.live_blocks() == 0 and not w.pinned
