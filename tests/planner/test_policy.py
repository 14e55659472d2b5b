from tandem.planner.policy import SWITCH_KINDS, Measured, PlannerConfig, RoleSwitch, plan
from tandem.router.snapshot import WorkerLoad

CFG = PlannerConfig(slo_ttft_ms=1000, slo_itl_ms=50, cooldown_s=60, margin=0.8, min_samples=20)


def w(wid, role, **kw):
    return WorkerLoad(worker_id=wid, url=wid, role=role, **kw)


POOL = (w("p0", "prefill", prefill_tokens=900), w("p1", "prefill", prefill_tokens=300),
        w("d0", "decode", decode_tokens=5000), w("d1", "decode", decode_tokens=2000, in_flight=3),
        w("d2", "decode", decode_tokens=2000, in_flight=1))


def test_ttft_missed_with_itl_to_spare_moves_the_lightest_decode_worker_to_both():
    m = Measured(ttft_p90_ms=1500, itl_p90_ms=40, ttft_samples=20, itl_samples=500)
    # d1 and d2 hold the least context; d2 has fewer open requests
    assert plan(m, POOL, CFG, None) == RoleSwitch("d2", "decode", "both", "ttft")


def test_itl_missed_with_ttft_to_spare_moves_the_least_queued_prefill_worker_to_both():
    m = Measured(ttft_p90_ms=800, itl_p90_ms=60, ttft_samples=5, itl_samples=20)
    assert plan(m, POOL, CFG, 61.0) == RoleSwitch("p1", "prefill", "both", "itl")


MIXED = (w("p0", "prefill", prefill_tokens=900), w("d0", "decode", decode_tokens=5000),
         w("b0", "both", decode_tokens=3000, prefill_tokens=100, in_flight=2),
         w("b1", "both", decode_tokens=1000, prefill_tokens=400, in_flight=1))


def test_a_both_worker_finishes_its_move_first_one_rung_at_a_time():
    # TTFT short: the both worker with the least context becomes a prefill worker, though d0 is alone
    assert plan(Measured(1500, 40, 20, 500), MIXED, CFG, None) == RoleSwitch("b1", "both", "prefill", "ttft")
    # ITL short: the both worker with the least queued prefill becomes a decode worker, though p0 is alone
    assert plan(Measured(800, 60, 5, 20), MIXED, CFG, None) == RoleSwitch("b0", "both", "decode", "itl")


def test_no_move_outside_a_disaggregated_fleet():
    colocated = (w("b0", "both"), w("b1", "both"), w("b2", "both"))
    assert plan(Measured(1500, 10, 20, 500), colocated, CFG, None) is None
    assert plan(Measured(100, 60, 20, 500), colocated, CFG, None) is None
    no_decode = (MIXED[0], MIXED[2], w("d0", "decode", healthy=False))
    assert plan(Measured(1500, 10, 20, 500), no_decode, CFG, None) is None


def test_a_one_role_fleet_moves_straight_to_the_other_role():
    prefill_only = (w("p0", "prefill", prefill_tokens=50), w("p1", "prefill", prefill_tokens=10))
    assert plan(Measured(800, 60, 5, 20), prefill_only, CFG, None) == RoleSwitch("p1", "prefill", "decode", "itl")
    decode_only = (w("d0", "decode", decode_tokens=50), w("d1", "decode", decode_tokens=10))
    assert plan(Measured(1500, 10, 20, 5), decode_only, CFG, None) == RoleSwitch("d1", "decode", "prefill", "ttft")


def test_no_move_when_the_other_metric_has_no_room_or_both_are_missed():
    # ITL at 41 ms is within target but above 0.8 x 50 = 40: giving up a decode worker would break it
    assert plan(Measured(1500, 41, 20, 500), POOL, CFG, None) is None
    assert plan(Measured(1500, 40, 20, 500), POOL, CFG, None) is not None
    assert plan(Measured(1500, 60, 20, 500), POOL, CFG, None) is None     # both missed
    assert plan(Measured(900, 45, 20, 500), POOL, CFG, None) is None      # both met


def test_cooldown_samples_and_the_last_worker_of_a_pool():
    m = Measured(ttft_p90_ms=1500, itl_p90_ms=10, ttft_samples=20, itl_samples=500)
    assert plan(m, POOL, CFG, 59.9) is None                              # too soon
    assert plan(Measured(1500, 10, 19, 500), POOL, CFG, None) is None    # too few TTFT samples
    one_decode = (POOL[0], POOL[1], POOL[2])
    assert plan(m, one_decode, CFG, None) is None                        # d0 stays
    draining = (POOL[0], POOL[2], w("d1", "decode", draining=True))
    assert plan(m, draining, CFG, None) is None                          # d1 does not count
    gone = (POOL[0], w("p1", "prefill", healthy=False), *POOL[2:])
    assert plan(Measured(500, 60, 5, 20), gone, CFG, None) is None       # one live prefill worker
    assert plan(Measured(500, 60, 5, 20), POOL, CFG, None) is not None


def test_a_missing_target_counts_as_met_and_no_target_disables():
    only_ttft = PlannerConfig(slo_ttft_ms=1000)
    assert plan(Measured(1500, 999, 20, 20), POOL, only_ttft, None).reason == "ttft"
    assert plan(Measured(None, None), POOL, only_ttft, None) is None
    assert not PlannerConfig().enabled and plan(Measured(1500, 1, 99, 99), POOL, PlannerConfig(), None) is None


def test_switch_kinds_list_exactly_what_plan_returns():
    """SWITCH_KINDS starts the switch counters' series at 0: it must hold every switch plan makes."""
    ttft, itl = Measured(1500, 40, 20, 20), Measured(800, 60, 20, 20)
    fleets = [(ttft, ("both", "decode", "decode")), (ttft, ("prefill", "decode", "decode")),
              (ttft, ("prefill", "both", "decode")), (itl, ("both", "prefill", "prefill")),
              (itl, ("prefill", "prefill", "decode")), (itl, ("prefill", "both", "decode"))]
    made = set()
    for m, roles in fleets:
        sw = plan(m, tuple(w(f"w{i}", r) for i, r in enumerate(roles)), CFG, None)
        made.add((sw.from_role, sw.to_role, sw.reason))
    assert made == set(SWITCH_KINDS)
