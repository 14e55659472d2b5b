"""placement: conditional disaggregation - prefill on a prefill worker, or on the decode worker.

In disaggregated mode the router picks a decode worker d and a prefill worker p for a request;
this policy decides where the prompt is computed:
- remote: p computes it and hands the KV over to d (d's decode streams never see the prefill);
- local: d serves the whole request, as a colocated worker would (no queue at p, no handoff,
  but d's streams wait for the request's prefill chunks in their steps).

Why. One prefill worker queues every prompt in arrival-ish order, while the decode worker may
have idle time: a tool result of a few hundred uncached tokens, or any prompt when d decodes
nothing, should not wait behind a long prefill queue. But every token d prefills delays each
stream decoding on d. So the policy trades the request's wait against the other streams' stall,
all in prefill-token units (the time to compute one uncached prompt token):

    u(w)    = num_prompt_tokens - value(w)   # what w must compute (and load) of it, prefix_value.py
    remote  = prefill_tokens(p) + u(p)         # p's queue, then this prompt (TTFT at p)
    local   = prefill_tokens(d) + u(d)         # d's own local prefills, then this prompt
    streams = max(in_flight(d), running(d))    # streams d is decoding (gateway's view, report)
    stall   = stall_weight * u(d) * streams    # each of them waits about u(d) tokens' time

    local   iff   remote - local > stall       (strictly: ties go remote)

with these rules first, in order:
1. no available prefill worker (down, draining or saturated): local ("no_prefill"), so the decode
   pool serves whole requests while the prefill pool cannot;
2. u(d) <= always_local_tokens: local ("short"): the old --local-prefill-tokens threshold;
3. disabled (`enabled=False`): remote ("off"): every request goes through a prefill worker;
4. remote ("decode_busy") when d decodes streams and u(d) > chunk_tokens, or when
   local > max_local_tokens. The first keeps what a stream can lose to one local prefill at one
   step carrying one chunk (the workers' chunk cap, long_prefill_token_threshold): a longer
   remainder stalls every stream for several steps, which is what disaggregation exists to
   avoid, and under a saturated prefill queue the comparison below would always pick local, so
   the decode worker would turn into a colocated one. The second bounds the local backlog an
   idle decode worker takes on, i.e. what streams arriving meanwhile wait behind;
5. local ("prefix") when d holds more of the prompt than p: value(d) >= value(p) + block_size,
   or d is the session's home in the decode pool (`RequestInfo.session_home`: its last turn was
   decoded there, so d holds that turn's prompt and answer even before the KV events say so)
   and p holds no more than d. Computing it on p would recompute what d has, and leave the
   session's prefix split over two caches: the next turn finds its history whole on neither
   (without this rule a session's turns alternated between p and d, and pd 1:1 reached 0.96 of
   the agentic workload's ideal cached tokens). The price: later turns of a session are
   computed on its decode worker (a turn's new part, at most chunk_tokens while d decodes), so
   a lone decode worker carries more of the prefill work. On with keep_prefix=True (off by default);
6. the comparison above: local ("idle_decode" when d decodes nothing, else "queue"), or remote
   ("remote"). When p computes at least m tokens fewer than d would (it holds more of the prompt,
   or is computing it for another request: routed prompts count as held), m = max(margin_blocks
   blocks, margin_frac of the prompt) as the router's near-best margin, local must win by more
   than stall + m: a near tie in this request's wait does not buy a second copy of a prompt in
   flight (a session arriving while its tenant's system prompt is prefilled for another session
   used to recompute it on an idle decode worker).

The handoff's own cost (a KV pull, one more hop) is not credited to local: with both workers
idle the request goes remote, which keeps d free for the streams that come next. The remote
estimate is an upper bound when p schedules shortest-first (tandem/engine/scheduler.py): a short
prompt there overtakes part of the queue; the error sends some short prompts local, where they
cost little stall.

Settings (PlacementConfig): enabled, stall_weight (raise it to protect inter-token latency,
lower it to favour time to first token), chunk_tokens, max_local_tokens, always_local_tokens,
keep_prefix (rule 5), margin_blocks and margin_frac (rule 6's near tie), tiers (the hit's value
per tier, prefix_value.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tandem.router.policies.prefix_aware import margin
from tandem.router.policies.prefix_value import TierWeights, prefix_value
from tandem.router.snapshot import RequestInfo, WorkerLoad


@dataclass(frozen=True)
class PlacementConfig:
    enabled: bool = True            # False: remote unless rule 1 or 2 applies (--prefill-placement remote)
    stall_weight: float = 1.0       # cost of one stream waiting one token's time, against the request's
    chunk_tokens: int = 256         # while d decodes streams, the longest remainder it prefills itself
    max_local_tokens: int = 2048    # local prefill a decode worker may hold (queued + this prompt)
    always_local_tokens: int = 0    # a remainder this short is always local (--local-prefill-tokens)
    # rule 5: local when d holds more of the prompt (or the session). Off by default: it keeps a
    # session's prefix whole (cached tokens 0.96 -> 0.98-1.00 of the ideal, simulated) but makes a
    # lone decode worker prefill later turns (p90 ITL +45-80% simulated), against design goal 2
    keep_prefix: bool = False
    # rule 6's near-equal margin, max(margin_blocks blocks, margin_frac of the prompt), as the
    # router's near-best (tandem/router/policies/combined.py)
    margin_blocks: int = 1
    margin_frac: float = 0.1
    tiers: TierWeights = field(default_factory=TierWeights)


@dataclass(frozen=True)
class Placement:
    local: bool
    reason: str                     # metric label: no_prefill, short, off, decode_busy, prefix, idle_decode,
                                    # queue, remote;
                                    # "both": the gateway chose a role=both worker (tandem/gateway/pd_flow.py)
    remote_tokens: float = 0.0      # the estimates above, for logs and tests
    local_tokens: float = 0.0
    stall_tokens: float = 0.0


def uncached(w: WorkerLoad, req: RequestInfo, tiers: TierWeights = TierWeights()) -> float:
    return req.num_prompt_tokens - prefix_value(w, req, tiers)


def streams(w: WorkerLoad) -> int:
    """Requests decoding on w: the gateway's open requests, or what w reported if more."""
    return max(w.in_flight, w.running)


def near_equal(saving: float, req: RequestInfo, cfg: PlacementConfig) -> float:
    """How much cheaper local must be to win when p computes `saving` tokens fewer than d would:
    the margin when the saving is at least the margin, else 0."""
    m = margin(req, cfg.margin_blocks, cfg.margin_frac)
    return m if saving >= m else 0.0


def place(prefill: WorkerLoad | None, decode: WorkerLoad, req: RequestInfo,
          cfg: PlacementConfig) -> Placement:
    """Where the prompt is computed; `prefill` is None when no prefill worker is available."""
    u_d = uncached(decode, req, cfg.tiers)
    local = decode.prefill_tokens + u_d
    stall = cfg.stall_weight * u_d * streams(decode)
    if prefill is None or not prefill.available:
        return Placement(True, "no_prefill", 0.0, local, stall)
    u_p = uncached(prefill, req, cfg.tiers)
    remote = prefill.prefill_tokens + u_p
    if u_d <= cfg.always_local_tokens:
        return Placement(True, "short", remote, local, stall)
    if not cfg.enabled:
        return Placement(False, "off", remote, local, stall)
    if local > cfg.max_local_tokens or (streams(decode) > 0 and u_d > cfg.chunk_tokens):
        return Placement(False, "decode_busy", remote, local, stall)
    home = req.session_home is not None and req.session_home == decode.worker_id
    if cfg.keep_prefix and (u_p - u_d >= req.block_size or (home and u_p >= u_d)):
        return Placement(True, "prefix", remote, local, stall)
    if remote - local > stall + near_equal(u_d - u_p, req, cfg):
        return Placement(True, "idle_decode" if streams(decode) == 0 else "queue", remote, local, stall)
    return Placement(False, "remote", remote, local, stall)
