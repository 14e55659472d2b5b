"""The agentic trace (tandem/sim/agentic.py) and the cached-token ratio the real router and
placement reach on it, against the trace's ideal (every repeated block a hit)."""

import pytest

from tandem.router.policies.placement import PlacementConfig
from tandem.sim.agentic import AgenticTrace, agentic_trace
from tandem.sim.config import SimConfig, parse_topology
from tandem.sim.fleet import Fleet
from tandem.sim.gateway import GatewayConfig

# 16 sessions of 6 turns, 2 tenants; first turns 2.5 s apart (a cold first prompt takes ~2.4 s on
# the cpu preset: closer, two sessions of a tenant compute its system prompt at once, which no
# routing can avoid), then closed loop with 1 s mean think time: 2-8 sessions in flight
LOAD = AgenticTrace(sessions=16, think_s=1.0, turns=6, session_gap_s=2.5)


def run(topology, placement=PlacementConfig(keep_prefix=True), trace=LOAD):
    t = agentic_trace(trace)
    cfg = SimConfig(trace="agentic", model="tandem-demo-target", accelerator="cpu", devices=1,
                    topology=parse_topology(topology), gateway=GatewayConfig(placement))
    fleet = Fleet(cfg, t)
    return fleet.run(), t


def test_the_trace_resends_each_conversation_and_runs_closed_loop():
    out, t = run("colocated:1", trace=AgenticTrace(sessions=2, turns=3, think_s=0.5))
    by_id = {r.request_id: r for r in t.requests}
    a, b = by_id["s0-t0"], by_id["s0-t1"]
    assert b.follows == "s0-t0" and a.follows is None
    # turn 1 resends turn 0's blocks, then its answer's
    assert b.block_hashes[:len(a.full_blocks(16))] == a.full_blocks(16)
    assert b.block_hashes[len(a.full_blocks(16)):][:len(a.output_hashes)] == a.output_hashes
    assert b.arrival == pytest.approx(a.finished + b.think_s)
    assert out["completed"] == 6 and out["lost"] == 0
    # the second tenant's sessions hit nothing of the first's: ideal = repeats within tenants
    assert 0.5 < t.ideal_hit_ratio < 1.0


@pytest.mark.parametrize("topology", ["colocated:2", "disagg:1p1d", "disagg:2p1d", "disagg:2p2d"])
def test_sessions_reach_the_ideal_cached_tokens(topology):
    out, _ = run(topology)
    assert out["completed"] == 96
    assert out["cache"]["of_ideal"] >= 0.99


def test_later_turns_prefilled_where_the_history_is_keep_the_prefix_whole():
    """Conditional prefill without rule 5 alternates a session's turns between the prefill and
    the decode worker, and each remote turn recomputes what the decode worker alone holds."""
    kept, _ = run("disagg:2p1d")
    split, _ = run("disagg:2p1d", PlacementConfig(keep_prefix=False))
    assert kept["placement"].get("prefix", 0) > 0 and "prefix" not in split["placement"]
    assert kept["cache"]["of_ideal"] == 1.0 and split["cache"]["of_ideal"] < 0.99
