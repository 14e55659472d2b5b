"""The default policy: sessions kept home, new sessions spread by their future, near-best prefix
(exact choices)."""

from dataclasses import replace

from tandem.router.policies import Combined, PrefixAware, PrefixAwareConfig
from tandem.router.policies.affinity import AffinityConfig, rendezvous_order
from tandem.router.policies.combined import SessionConfig
from tandem.router.policies.prefix_value import TierWeights, prefix_value
from tandem.router.snapshot import RequestInfo, Snapshot, WorkerLoad

BS = 16


def snap(*workers, prompt=480, session="s1", home=None, shared=0, seq=0):
    return Snapshot(tuple(workers), RequestInfo(num_prompt_tokens=prompt, block_size=BS,
                                                shared_blocks=shared, session_id=session,
                                                session_home=home, seq=seq))


def w(wid, **kw):
    return WorkerLoad(worker_id=wid, url=wid, role="both", **kw)


def place_sessions(n, workers, system_blocks, prompt):
    """n new sessions one after another on idle workers that keep what they computed: the
    first to serve the shared system prompt holds it from then on. Returns worker per session."""
    ws = {x.worker_id: x for x in workers}
    out = []
    for i in range(n):
        d = Combined().choose(snap(*ws.values(), prompt=prompt, session=f"session-{i}", seq=i))
        out.append((d.worker_id, d.reason))
        chosen = ws[d.worker_id]
        ws[d.worker_id] = replace(chosen, sessions=chosen.sessions + 1, cached_blocks=system_blocks)
    return out


def test_eight_new_sessions_with_a_shared_system_prompt_spread_four_four():
    # 300 words of system prompt (~400 tokens, 25 blocks) and a short first message: the first
    # session's worker holds the prompt, yet the next session goes to the worker with fewer
    for system in (25, 1):   # a long shared system prompt, or only the chat template's opening
        got = place_sessions(8, (w("a"), w("b")), system, prompt=system * BS + 40)
        homes = [x for x, _ in got]
        assert homes.count("a") == 4 and homes.count("b") == 4
        assert all(r.startswith("new_") for _, r in got)
        assert homes[0] == rendezvous_order("session-0", (w("a"), w("b")))[0].worker_id


def test_two_tenants_sessions_alternating_each_stay_with_their_tenants_prompt():
    # tenants 0 and 1 (25-block system prompts of their own) start sessions in turn on two idle
    # workers: each tenant's sessions gather where its prompt is, four and four
    ws = {x: w(x) for x in ("a", "b")}
    held: dict[str, set[int]] = {"a": set(), "b": set()}
    got = []
    for i in range(8):
        tenant = i % 2
        placed = [replace(x, cached_blocks=25 if tenant in held[x.worker_id] else 0) for x in ws.values()]
        d = Combined().choose(snap(*placed, prompt=25 * BS + 40, session=f"s{i}", seq=i))
        got.append((tenant, d.worker_id))
        held[d.worker_id].add(tenant)
        ws[d.worker_id] = replace(ws[d.worker_id], sessions=ws[d.worker_id].sessions + 1)
    homes = {t: {wid for tt, wid in got if tt == t} for t in (0, 1)}
    assert len(homes[0]) == 1 and len(homes[1]) == 1 and homes[0] != homes[1]
    # with a slack of one the counts alone decide every other session: both prompts on both
    strict = Combined(sessions=SessionConfig(new_session_slack=1))
    ws2 = (w("a", cached_blocks=25, sessions=2), w("b", sessions=1))
    assert strict.choose(snap(*ws2, prompt=25 * BS + 40, session="s9")).worker_id == "b"
    assert Combined().choose(snap(*ws2, prompt=25 * BS + 40, session="s9")).worker_id == "a"


def test_a_large_slack_lets_the_prefix_bind_every_new_session():
    lax = Combined(sessions=SessionConfig(new_session_slack=1000))
    ws = (w("a", cached_blocks=25, sessions=3), w("b"))
    d = lax.choose(snap(*ws, prompt=440, session="s9"))
    assert (d.worker_id, d.reason) == ("a", "new_prefix")
    # the default slack of two: a holds three sessions, b none, so b
    d = Combined().choose(snap(*ws, prompt=440, session="s9"))
    assert (d.worker_id, d.reason) == ("b", "new_load")


def test_decoding_contexts_weigh_little_against_a_tenants_system_prompt():
    # a holds the tenant's 2,656-token system prompt (166 blocks) and decodes two sessions on
    # 4.5k-token contexts; b is idle and holds another tenant's prompt. The new session's first
    # turn (2,800 tokens) goes to a: the decoding contexts delay its prefill by their share of a
    # step, not by 9,000 tokens of work
    ws = (w("a", cached_blocks=166, decode_tokens=9000, sessions=2), w("b", sessions=2))
    d = Combined().choose(snap(*ws, prompt=2800, session="s9"))
    assert (d.worker_id, d.reason) == ("a", "new_prefix")
    # weighted like queued prefill, a was over the load bound (9,000 + 144 > 1.5 x 11,800 / 2)
    heavy = Combined(affinity=AffinityConfig(),
                     prefix=PrefixAware(PrefixAwareConfig(margin_blocks=1, margin_frac=0.1)))
    d = heavy.choose(snap(*ws, prompt=2800, session="s9"))
    assert (d.worker_id, d.reason) == ("b", "new_load")


def test_a_session_stays_home_across_turns_over_a_longer_prefix_elsewhere():
    ws = (w("a", cached_blocks=5, sessions=1), w("b", cached_blocks=20, sessions=1))
    d = Combined().choose(snap(*ws, home="a"))
    assert (d.worker_id, d.policy, d.reason) == ("a", "default", "affinity")


def test_a_session_leaves_a_dead_or_overloaded_home():
    ws = (w("a", healthy=False, cached_blocks=20), w("b"), w("c", cached_blocks=10))
    d = Combined().choose(snap(*ws, home="a"))
    assert (d.worker_id, d.reason) == ("c", "session_prefix")
    # over the bound: max(4096, 1.5 * (30000 + 480) / 2) = 22860 < 30480
    ws = (w("a", prefill_tokens=30000, cached_blocks=20), w("b"))
    d = Combined().choose(snap(*ws, home="a"))
    assert (d.worker_id, d.reason) == ("b", "session_load")


def test_no_session_takes_the_least_loaded_of_the_near_best():
    # prompt 480: margin = max(16, 48) = 48 tokens. a holds 2 blocks more than b (32 tokens):
    # both near-best, b is less loaded
    ws = (w("a", cached_blocks=10, prefill_tokens=8), w("b", cached_blocks=8))
    d = Combined().choose(snap(*ws, session=None))
    assert (d.worker_id, d.reason, d.scores) == ("b", "load", {"a": 328.0, "b": 352.0})
    # 4 blocks more (64 tokens) is past the margin: the longer prefix wins
    ws = (w("a", cached_blocks=12, prefill_tokens=8), w("b", cached_blocks=8))
    assert Combined().choose(snap(*ws, session=None)).worker_id == "a"


def test_a_new_session_waits_for_its_tenants_prompt_rather_than_recomputing_it_near_a_tie():
    # a computes the tenant's 1,696-token system prompt for another session (routed: held) and
    # has it queued; b is idle. Costs: a 1768 + 72, b 1768, near-best both (margin 177 tokens);
    # a's hit is larger by far more than the margin, so a, not the least loaded b
    ws = (w("a", cached_blocks=106, prefill_tokens=1768, sessions=1), w("b", sessions=1))
    d = Combined().choose(snap(*ws, prompt=1768, session="s3"))
    assert (d.worker_id, d.reason) == ("a", "new_prefix")
    # with a queue past the margin the idle worker computes its own copy
    ws = (w("a", cached_blocks=106, prefill_tokens=2000, sessions=1), w("b", sessions=1))
    assert Combined().choose(snap(*ws, prompt=1768, session="s3")).worker_id == "b"
    # hits within the margin of each other (one block): the least loaded, as before
    ws = (w("a", cached_blocks=2, prefill_tokens=100, sessions=1), w("b", cached_blocks=1, sessions=1))
    assert Combined().choose(snap(*ws, prompt=1768, session="s3")).worker_id == "b"


def test_the_margin_setting_is_respected():
    ws = (w("a", cached_blocks=10, prefill_tokens=8), w("b", cached_blocks=8))
    # no margin: the lowest cost (a: 8 + 320 = 328 against b: 352)
    exact = PrefixAware()
    assert exact.choose(snap(*ws, session=None)).worker_id == "a"
    # one block only (16 < 352 - 328 = 24): still a
    one = PrefixAware(PrefixAwareConfig(margin_blocks=1))
    assert one.choose(snap(*ws, session=None)).worker_id == "a"
    # two blocks (32 >= 24): near-best, least loaded
    two = PrefixAware(PrefixAwareConfig(margin_blocks=2))
    assert two.choose(snap(*ws, session=None)).worker_id == "b"
    # a fraction of the prompt: 7% of 480 = 33.6 >= 24 in cost and >= 32 in hit
    frac = PrefixAware(PrefixAwareConfig(margin_frac=0.07))
    assert frac.choose(snap(*ws, session=None)).worker_id == "b"
    # 5% = 24: near-best in cost, but a's hit is larger by 32 tokens, more than the margin
    assert PrefixAware(PrefixAwareConfig(margin_frac=0.05)).choose(snap(*ws, session=None)).worker_id == "a"
    assert PrefixAware(PrefixAwareConfig(margin_frac=0.04)).choose(snap(*ws, session=None)).worker_id == "a"


def test_tiers_are_valued_below_the_device():
    req = RequestInfo(num_prompt_tokens=480, block_size=BS, shared_blocks=10)
    t = TierWeights()
    assert prefix_value(w("d", cached_blocks=10), req, t) == 160.0
    assert prefix_value(w("h", host_blocks=10), req, t) == 160 * 0.99
    assert prefix_value(w("k", disk_blocks=10), req, t) == 160 * 0.96
    assert prefix_value(w("s"), req, t) == 160 * 0.9
    # each block at the cheapest tier holding the run up to it: 4 on device, 2 more on host,
    # 4 more in the store
    mixed = w("m", cached_blocks=4, host_blocks=6)
    assert prefix_value(mixed, req, t) == 64 + 32 * 0.99 + 64 * 0.9


def test_a_store_hit_is_scored_below_an_equal_device_hit():
    # equal loads, equal runs: the device holder wins over the one that would load from the store
    ws = (w("s"), w("d", cached_blocks=10))
    d = PrefixAware().choose(snap(*ws, session=None, shared=10))
    assert (d.worker_id, d.scores) == ("d", {"s": 480 - 144.0, "d": 480 - 160.0})
    # and over an equal host hit
    ws = (w("h", host_blocks=10), w("d", cached_blocks=10))
    assert PrefixAware().choose(snap(*ws, session=None)).worker_id == "d"


def test_in_a_prefill_pool_new_sessions_follow_the_prefix_not_the_session_counts():
    ws = (WorkerLoad("a", "a", "prefill", cached_blocks=25, sessions=3),
          WorkerLoad("b", "b", "prefill"))
    d = Combined().choose(snap(*ws, prompt=440, session="s9"))
    assert (d.worker_id, d.reason) == ("a", "new_prefix")
