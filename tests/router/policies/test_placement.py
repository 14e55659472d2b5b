from tandem.router.policies.placement import Placement, PlacementConfig, place
from tandem.router.snapshot import RequestInfo, WorkerLoad

BS = 16


def req(prompt):
    return RequestInfo(num_prompt_tokens=prompt, block_size=BS)


def p(**kw):
    return WorkerLoad(worker_id="p", url="http://p", role="prefill", **kw)


def d(**kw):
    return WorkerLoad(worker_id="d", url="http://d", role="decode", **kw)


CFG = PlacementConfig()


def test_both_idle_goes_remote_ties_included():
    # remote = 0 + 1000, local = 0 + 1000, stall = 0 (no stream): no gain, so remote
    assert place(p(), d(), req(1000), CFG) == Placement(False, "remote", 1000, 1000, 0)


def test_idle_decode_worker_never_waits_behind_a_prefill_queue():
    # remote = 3000 queued + 1000, local = 1000, nobody decodes on d: local
    assert place(p(prefill_tokens=3000), d(), req(1000), CFG) == \
        Placement(True, "idle_decode", 4000, 1000, 0)
    # one queued token is enough when d is idle
    assert place(p(prefill_tokens=1), d(), req(1000), CFG).local


def test_short_remainder_beats_a_queue_unless_the_stall_is_worse():
    # the prompt is cached on d but for 64 tokens (60 blocks of 1024); p has none of it
    view = dict(cached_blocks=60, in_flight=4)
    # remote = 500 + 1024, local = 64, stall = 64 * 4 streams = 256: 1460 > 256, local; but
    # first d holds 960 tokens p lacks: local to keep the prefix whole (rule 5)
    assert place(p(prefill_tokens=500), d(**view), req(1024), PlacementConfig(keep_prefix=True)) == \
        Placement(True, "prefix", 1524, 64, 256)
    assert place(p(prefill_tokens=500), d(**view), req(1024), CFG) == \
        Placement(True, "queue", 1524, 64, 256)   # rule 5 is off by default
    # p holds the prefix too: remote = 500 + 64; gain 500 > 256 still local
    assert place(p(prefill_tokens=500, cached_blocks=60), d(**view), req(1024), CFG).local
    # with a queue of 250 the gain (250) no longer pays for the stall (256): remote
    got = place(p(prefill_tokens=250, cached_blocks=60), d(**view), req(1024), CFG)
    assert got == Placement(False, "remote", 314, 64, 256)
    # the stall weight moves the line: 0.5 -> stall 128 < 250, local
    assert place(p(prefill_tokens=250, cached_blocks=60), d(**view), req(1024),
                 PlacementConfig(stall_weight=0.5)).local


def test_streams_are_the_larger_of_the_gateways_count_and_the_report():
    got = place(p(prefill_tokens=2000), d(in_flight=1, running=5), req(200), CFG)
    # stall = 200 * 5 = 1000 < remote - local = 2200 - 200 = 2000
    assert got == Placement(True, "queue", 2200, 200, 1000)
    got = place(p(prefill_tokens=2000), d(in_flight=1, running=11), req(200), CFG)
    assert got == Placement(False, "remote", 2200, 200, 2200)


def test_with_streams_decoding_only_one_chunk_goes_local_however_long_the_queue():
    # 257 uncached tokens would take d's streams two steps with a chunk: remote, even behind 50k
    got = place(p(prefill_tokens=50_000), d(in_flight=1), req(257), CFG)
    assert got == Placement(False, "decode_busy", 50_257, 257, 257)
    assert place(p(prefill_tokens=50_000), d(in_flight=1), req(256), CFG).reason == "queue"
    # an idle decode worker takes it
    assert place(p(prefill_tokens=50_000), d(), req(257), CFG).reason == "idle_decode"


def test_local_backlog_on_the_decode_worker_is_bounded():
    # d already prefills 1100 tokens locally: 1100 + 1000 > 2048, remote however long p's queue
    got = place(p(prefill_tokens=50_000), d(prefill_tokens=1100), req(1000), CFG)
    assert got == Placement(False, "decode_busy", 51_000, 2100, 0)
    assert place(p(prefill_tokens=50_000), d(prefill_tokens=1000), req(1000), CFG).reason == "idle_decode"


def test_local_queue_counts_against_local():
    # d has 900 tokens of local prefill queued: local = 1900 against remote = 1000 + 1000
    got = place(p(prefill_tokens=1000), d(prefill_tokens=900), req(1000), CFG)
    assert got == Placement(True, "idle_decode", 2000, 1900, 0)
    got = place(p(prefill_tokens=1000), d(prefill_tokens=1000), req(1000), CFG)
    assert got == Placement(False, "remote", 2000, 2000, 0)


def test_no_prefill_worker_means_local():
    assert place(None, d(in_flight=9), req(1000), CFG) == Placement(True, "no_prefill", 0, 1000, 9000)
    assert place(p(saturated=True), d(), req(10), CFG).reason == "no_prefill"
    assert place(p(healthy=False), d(), req(10), CFG).reason == "no_prefill"


def test_disabled_is_always_remote_but_for_the_old_threshold():
    off = PlacementConfig(enabled=False)
    assert place(p(prefill_tokens=9999), d(), req(1000), off) == Placement(False, "off", 10999, 1000, 0)
    # --local-prefill-tokens 10 still serves a 10-token remainder locally, however busy d is
    short = PlacementConfig(enabled=False, always_local_tokens=10)
    assert place(p(), d(in_flight=50), req(10), short) == Placement(True, "short", 10, 10, 500)
    assert place(p(), d(in_flight=50), req(11), short).reason == "off"


def test_fully_cached_prompt_on_the_decode_worker_is_local():
    # u(d) = 0 <= always_local_tokens (0): nothing to compute there, nothing to hand over
    got = place(p(), d(cached_blocks=4, in_flight=3), req(64), CFG)
    assert got == Placement(True, "short", 64, 0, 0)


def test_a_prefill_worker_computing_the_prompt_wins_a_near_tie_against_recomputing_it():
    # p is computing a 1,696-token system prompt (routed: counted as held) for another session,
    # d is idle without it: remote = 1768 queued + 72, local = 1768. Within the margin
    # (max(16, 10% of 1768)) of local while it saves d 1,696 tokens of work: remote
    got = place(p(prefill_tokens=1768, cached_blocks=106), d(), req(1768), CFG)
    assert got == Placement(False, "remote", 1840, 1768, 0)
    # past the margin (another 200 tokens queued at p): d computes its own copy
    got = place(p(prefill_tokens=1968, cached_blocks=106), d(), req(1768), CFG)
    assert got == Placement(True, "idle_decode", 2040, 1768, 0)
    # a saving under the margin (one block) buys no slack: the one-token rule of an idle d holds
    got = place(p(prefill_tokens=17, cached_blocks=1), d(), req(1768), CFG)
    assert got.local and got.reason == "idle_decode"
    # no margin configured: the plain comparison
    assert place(p(prefill_tokens=1768, cached_blocks=106), d(), req(1768),
                 PlacementConfig(margin_blocks=0, margin_frac=0.0)).local
