"""prefix_aware: send a request where its prefix is cached, unless that worker is a hotspot.

Algorithm
---------
The gateway hashes the prompt's full blocks with the workers' chained block hash (same seed,
block size and KV partition: cache salt and tenant), and asks its `PrefixIndex` (fed by each
worker's KV events) how many *leading* blocks of that chain each worker holds:
`cached_blocks(w)`. Because the hashes are chained, holding block i implies the worker had
blocks 0..i-1 when it stored i; the index still counts only the unbroken run from block 0, which
is what the worker can reuse.

For each available worker w:

    uncached(w) = num_prompt_tokens - block_size * cached_blocks(w)   # work this request adds
    load(w)     = prefill_tokens(w) + decode_weight * decode_tokens(w) # work already queued
    cost(w)     = load(w) + uncached(w)

`cost` estimates, in tokens to compute, how long until this request's first token on w (a queue
of pending prefill plus its own uncached part, with decode context as extra drag). Lowest cost
wins: a long cached prefix beats a somewhat shorter queue, and a long queue beats a short prefix.

Tiers: a worker may also hold leading blocks below its device (host memory, disk) and every
worker can load those of the shared KV store (`shared_blocks`, the prefix index's pseudo-worker
"store"). A block loaded is not computed, but its load costs a fraction of computing it, so the
hit is valued tier by tier (prefix_value.py: device 1, host 0.99, disk 0.96, store 0.9 of a
computed token by default) and

    cost(w)     = load(w) + num_prompt_tokens - value(w)

so a prefix every worker can load is cheap anywhere and the least-loaded worker takes it, unless
the holder's queue is within the (small) load cost of the others; an equal hit on the device
beats one in the store.

Hotspot guard: with a popular prefix held by one worker, every request would pile onto it while
its queue grows only as fast as the cost allows. Before scoring, a worker is excluded when it is
far more loaded than the least-loaded worker, in both absolute and relative terms (the same two
tests SGLang's cache_aware router uses to call a system imbalanced):

    load(w) - min_load > balance_abs_tokens   and   load(w) > balance_rel * min_load

The least-loaded worker is never excluded, so a choice always exists. Once a second worker has
served the prefix it holds it too, and the load spreads over both.

Near-best (off by default, on in the default policy): with a margin
m = max(margin_blocks * block_size, margin_frac * num_prompt_tokens), every cool worker whose cost
is within m of the lowest is near-best; of those, the ones whose hit is within m of the largest
hit among them, then the least loaded (loads within m of the least count as equal: a few tokens
of a report's offset or a decode tail decide nothing), then the one holding fewest sessions, then
the lowest cost. A prefix that differs by less than the margin (a chat template's opening shared
by every request) then does not pull every request onto one worker, while at a near tie in cost
a worker that holds (or is computing: routed_prefixes.py) far more of the prompt wins over an
idle one that would compute it again: the tie is in this request's wait, the hit saves the
fleet's work (a session arriving while its tenant's system prompt is computed for another
session waits for it instead of computing a second copy). Without a margin the lowest cost
wins, then the least load.

Reasons (metric labels): "prefix" - the winner holds the longest match (> 0 blocks) of all
available workers; "store" - the winner holds less of the prompt than the shared store and loads
the rest from it; "load" - the winner was chosen by load (no worker holds any of the prefix, or a
less-loaded worker beat the longest match); "hotspot" - the longest match was held only by
workers the guard excluded.

Settings (PrefixAwareConfig):
- decode_weight: weight of a decode context token against a pending prefill token (as token_aware).
- balance_abs_tokens: a worker is a hotspot only if its load exceeds the minimum by more than this.
- balance_rel: ... and exceeds this multiple of the minimum load.
- tiers: cost of a token loaded from each tier against computing it (prefix_value.TierWeights).
- margin_blocks, margin_frac: the near-best margin (0, 0.0: none).
Ties (e.g. an idle pool) go by the session's rendezvous order (affinity.py) when the request has
a session, else rotate with the request counter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tandem.router.policies.affinity import rendezvous_score
from tandem.router.policies.base import candidates, rotation, token_load
from tandem.router.policies.prefix_value import TierWeights, prefix_value
from tandem.router.snapshot import Decision, RequestInfo, Snapshot, WorkerLoad


@dataclass(frozen=True)
class PrefixAwareConfig:
    decode_weight: float = 1.0
    balance_abs_tokens: int = 8192
    balance_rel: float = 2.0
    tiers: TierWeights = field(default_factory=TierWeights)
    margin_blocks: int = 0      # near-best: within max(margin_blocks blocks, margin_frac of the
    margin_frac: float = 0.0    # prompt) of the lowest cost; 0 and 0.0: the lowest cost only


def is_hotspot(load: float, min_load: float, cfg: PrefixAwareConfig) -> bool:
    return load - min_load > cfg.balance_abs_tokens and load > cfg.balance_rel * min_load


def margin(req: RequestInfo, blocks: int, frac: float) -> float:
    """The near-best margin in tokens: max(`blocks` blocks, `frac` of the prompt)."""
    return max(blocks * req.block_size, frac * req.num_prompt_tokens)


@dataclass(frozen=True)
class PrefixAware:
    config: PrefixAwareConfig = field(default_factory=PrefixAwareConfig)
    name: str = "prefix_aware"

    def choose(self, snap: Snapshot) -> Decision:
        return self.pick(snap, candidates(snap))

    def pick(self, snap: Snapshot, ws: Sequence[WorkerLoad]) -> Decision:
        """The choice among `ws` (available workers, at least one)."""
        cfg, req = self.config, snap.request
        loads = {w.worker_id: token_load(w, cfg.decode_weight) for w in ws}
        min_load = min(loads.values())
        cool = [w for w in ws if not is_hotspot(loads[w.worker_id], min_load, cfg)]
        value = {w.worker_id: prefix_value(w, req, cfg.tiers) for w in ws}
        cost = {w.worker_id: loads[w.worker_id] + req.num_prompt_tokens - value[w.worker_id]
                for w in cool}
        best_cost = min(cost.values())
        m = margin(req, cfg.margin_blocks, cfg.margin_frac)
        near = [w for w in cool if cost[w.worker_id] <= best_cost + m + 1e-9]
        if req.session_id is not None:   # a session's own order: stable whatever the counter
            rank = {w.worker_id: -rendezvous_score(req.session_id, w.worker_id) for w in ws}
        else:
            rank = rotation(ws, req.seq)
        if len(near) == 1 or (cfg.margin_blocks == 0 and cfg.margin_frac == 0.0):
            key = lambda w: (cost[w.worker_id], loads[w.worker_id], w.sessions, rank[w.worker_id])  # noqa: E731
        else:   # near-best: the largest hits (within the margin), then the least loaded (within
            # the margin), then the one holding fewest sessions
            most = max(value[w.worker_id] for w in near)
            near = [w for w in near if value[w.worker_id] >= most - m - 1e-9]
            least = min(loads[w.worker_id] for w in near)
            near = [w for w in near if loads[w.worker_id] <= least + m + 1e-9]
            key = lambda w: (w.sessions, loads[w.worker_id], cost[w.worker_id], rank[w.worker_id])  # noqa: E731
        best = min(near, key=key)
        longest_all = max(value.values())
        longest_cool = max(value[w.worker_id] for w in cool)
        if req.shared_blocks > max(best.cached_blocks, best.host_blocks, best.disk_blocks):
            reason = "store"
        elif longest_all > 0 and value[best.worker_id] == longest_all:
            reason = "prefix"
        elif longest_all > longest_cool:
            reason = "hotspot"
        else:
            reason = "load"
        return Decision(best.worker_id, self.name, reason, cost)
