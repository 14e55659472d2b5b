"""The fair queue's order: weighted token shares across tenants first, then priority (with aging)
inside each tenant; bounds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.gateway.admission.fair_queue import Entry, FairQueue, FairQueueConfig


def q(**kw) -> FairQueue:
    return FairQueue(FairQueueConfig(**{"max_requests": 10_000, **kw}))


def push(fq: FairQueue, tenant: str, cost: int, priority: int = 0, at: float = 0.0) -> Entry:
    e = Entry(tenant, priority, cost, at, item=f"{tenant}{cost}")
    assert fq.push(e)
    return e


def drain(fq: FairQueue, now: float = 0.0) -> list[Entry]:
    out = []
    while (e := fq.pop(now)) is not None:
        out.append(e)
    return out


def test_lower_priority_value_first_then_arrival():
    fq = q()
    a = push(fq, "a", 10, priority=5)
    b = push(fq, "a", 10, priority=0)
    c = push(fq, "a", 10, priority=5)
    d = push(fq, "a", 10, priority=-1)
    assert drain(fq) == [d, b, a, c]


def test_a_small_tenant_is_served_between_a_floods_requests():
    fq = q()
    flood = [push(fq, "A", 100) for _ in range(10)]
    small = [push(fq, "B", 100) for _ in range(2)]
    order = drain(fq)
    # equal weights, equal costs: they alternate while both wait
    assert order[:4] == [flood[0], small[0], flood[1], small[1]]
    assert order[4:] == flood[2:]


def test_shares_are_by_tokens_not_requests():
    fq = q()
    for _ in range(20):
        push(fq, "big", 1000)
    for _ in range(200):
        push(fq, "small", 100)
    first = drain(fq)[:44]   # 22000 tokens' worth while both wait
    tokens = {t: sum(e.cost for e in first if e.tenant == t) for t in ("big", "small")}
    assert abs(tokens["big"] - tokens["small"]) <= 1000


def test_weights_scale_the_share():
    fq = q(weights=(("gold", 3.0),))
    for _ in range(40):
        push(fq, "gold", 10)
        push(fq, "free", 10)
    first = drain(fq)[:40]
    assert sum(e.tenant == "gold" for e in first) == 30


def test_an_idle_tenant_earns_no_credit():
    fq = q()
    a = [push(fq, "A", 10) for _ in range(10)]
    assert [fq.pop(0.0) for _ in range(5)] == a[:5]   # A alone: the virtual time moves with it
    b = [push(fq, "B", 10) for _ in range(3)]
    # B joins at the current virtual time, not at zero: one turn each, not three in a row for B
    assert drain(fq)[:5] == [b[0], a[5], b[1], a[6], b[2]]


def test_an_empty_queue_forgets_its_virtual_time():
    fq = q()
    push(fq, "A", 10)
    drain(fq)
    a, b = push(fq, "A", 10), push(fq, "B", 10)
    assert drain(fq) == [a, b]      # A's clock was forgotten: a tie, broken by arrival


def test_removed_entry_is_skipped_and_shifts_nothing():
    fq = q()
    a = [push(fq, "A", 10) for _ in range(3)]
    b = [push(fq, "B", 10) for _ in range(3)]
    assert fq.remove(a[1]) and not fq.remove(a[1])
    assert drain(fq) == [a[0], b[0], a[2], b[1], b[2]]
    assert len(fq) == 0 and fq.depths() == {}


def test_tenant_bound_by_requests_and_tokens():
    fq = FairQueue(FairQueueConfig(max_requests=2, max_tokens=150))
    assert fq.push(Entry("A", 0, 100, 0.0))
    assert not fq.push(Entry("A", 0, 100, 0.0))     # 200 tokens > 150
    assert fq.push(Entry("A", 0, 50, 0.0))
    assert not fq.push(Entry("A", 0, 1, 0.0))       # 2 requests already
    assert fq.push(Entry("B", 0, 500, 0.0))         # alone, one request over the token bound waits
    assert fq.depth("A") == 2 and fq.queued_tokens("A") == 150


def test_an_extreme_priority_buys_no_more_than_the_weighted_share():
    fq = q()
    for _ in range(50):
        push(fq, "X", 100, priority=-1_000_000_000)
        push(fq, "Y", 100, priority=0)
    order = drain(fq, now=0.0)
    assert {order[0].tenant, order[1].tenant} == {"X", "Y"}   # Y's first goes at once
    served = {"X": 0, "Y": 0}
    for e in order[:60]:
        served[e.tenant] += e.cost
        assert abs(served["X"] - served["Y"]) <= 100             # within one request's cost


def test_priority_orders_only_the_tenants_own_requests():
    fq = q()
    late = [push(fq, "A", 10, priority=5) for _ in range(2)]
    urgent = push(fq, "A", 10, priority=-3)
    b = [push(fq, "B", 10, priority=0) for _ in range(3)]
    # A and B alternate; A's own urgent request is A's first
    assert drain(fq) == [urgent, b[0], late[0], b[1], late[1], b[2]]


def test_aging_bounds_starvation_inside_a_tenant():
    fq = q(aging_s=5.0)
    old = push(fq, "A", 10, priority=2, at=0.0)
    for _ in range(5):
        push(fq, "A", 10, priority=0, at=9.0)
    assert fq.pop(now=9.0).priority == 0    # 2 - 1 level of aging > 0: not yet
    assert fq.pop(now=10.0) is old          # 2 - 2 levels = 0 ties the flood's 0: older first


def test_aging_never_beats_the_best_priority_the_tenant_has_waiting():
    fq = q(aging_s=1.0)
    old = push(fq, "A", 10, priority=3, at=0.0)
    best = push(fq, "A", 10, priority=1, at=50.0)
    # aged 3 - 60 levels would be -57, but counts as 1 at best: a tie, broken by arrival
    assert fq.pop(now=60.0) is old and fq.pop(now=60.0) is best


@settings(max_examples=60, deadline=None)
@given(a=st.lists(st.tuples(st.integers(1, 500), st.integers(-10**12, 10)), min_size=30,
                 max_size=60),
       b=st.lists(st.tuples(st.integers(1, 500), st.integers(-2, 10**12)), min_size=30, max_size=60),
       wa=st.sampled_from([1.0, 2.0, 3.0]), wb=st.sampled_from([1.0, 2.0]),
       step=st.sampled_from([0.0, 0.5, 7.0]))
def test_weighted_token_shares_within_one_request_whatever_the_priorities(a, b, wa, wb, step):
    """While both tenants wait, each one's served tokens / weight differ by at most one request's
    cost / weight (the classic fair queueing bound), whatever priorities their clients send and
    however long they have waited (aging reorders a tenant's own requests only)."""
    fq = q(weights=(("A", wa), ("B", wb)), aging_s=1.0)
    for c, p in a:
        push(fq, "A", c, priority=p)
    for c, p in b:
        push(fq, "B", c, priority=p)
    served = {"A": 0, "B": 0}
    left = {"A": len(a), "B": len(b)}
    bound = 500 / min(wa, wb) + 500 / max(wa, wb)
    now = 0.0
    while left["A"] and left["B"]:
        now += step
        e = fq.pop(now)
        served[e.tenant] += e.cost
        left[e.tenant] -= 1
        assert abs(served["A"] / wa - served["B"] / wb) <= bound


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("ABC"), st.integers(-2, 2), st.integers(1, 300)),
                min_size=1, max_size=80))
def test_every_entry_leaves_once_in_its_tenants_priority_order_without_aging(entries):
    fq = q(aging_s=1e9)
    pushed = [push(fq, t, c, priority=p) for t, p, c in entries]
    order = drain(fq)
    assert sorted(map(id, order)) == sorted(map(id, pushed))
    for tenant in "ABC":
        own = [e for e in order if e.tenant == tenant]
        assert own == sorted(own, key=lambda e: (e.priority, e.seq))   # lower first, then arrival
    assert len(fq) == 0 and fq.depths() == {}


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 5), st.integers(1, 30))
def test_no_starvation_under_a_steady_flood_of_the_tenants_own(gap, flood_per_s):
    """A request of priority 3 behind its own tenant's flood of priority 0 that never ends (new
    requests each second, growing faster than it is served) leaves within (3 - 0) * aging_s and
    one release."""
    fq = q(aging_s=1.0)
    now = 0.0
    victim = push(fq, "T", 10, priority=3, at=float(gap) / 10)
    t = 0
    while True:
        now = t / flood_per_s
        for _ in range(2):
            push(fq, "T", 10, priority=0, at=now)
        if fq.pop(now) is victim:
            break
        t += 1
        assert now - victim.arrival <= 3.0 + 1.0 / flood_per_s
