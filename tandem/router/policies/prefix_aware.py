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

Shared store: with a KV store every worker loads from (tandem/kvstore), the prefix index also
knows `shared_blocks`, the prompt's leading blocks in the store. A worker lacking them locally
loads them instead of computing them, at `store_load_weight` of a computed token each:

    held(w)     = max(cached_blocks(w), shared_blocks)
    uncached(w) = num_prompt_tokens - block_size * held(w)
    loaded(w)   = block_size * max(0, shared_blocks - cached_blocks(w))
    cost(w)     = load(w) + uncached(w) + store_load_weight * loaded(w)

so a prefix every worker can load is cheap anywhere and the least-loaded worker takes it, unless
the holder's queue is within the (small) load cost of the others.

Hotspot guard: with a popular prefix held by one worker, every request would pile onto it while
its queue grows only as fast as the cost allows. Before scoring, a worker is excluded when it is
far more loaded than the least-loaded worker, in both absolute and relative terms (the same two
tests SGLang's cache_aware router uses to call a system imbalanced):

    load(w) - min_load > balance_abs_tokens   and   load(w) > balance_rel * min_load

The least-loaded worker is never excluded, so a choice always exists. Once a second worker has
served the prefix it holds it too, and the load spreads over both.

Reasons (metric labels): "prefix" - the winner holds the longest match (> 0 blocks) of all
available workers; "store" - the winner holds less of the prompt than the shared store and loads
the rest from it; "load" - the winner was chosen by load (no worker holds any of the prefix, or a
less-loaded worker beat the longest match); "hotspot" - the longest match was held only by
workers the guard excluded.

Settings (PrefixAwareConfig):
- decode_weight: weight of a decode context token against a pending prefill token (as token_aware).
- balance_abs_tokens: a worker is a hotspot only if its load exceeds the minimum by more than this.
- balance_rel: ... and exceeds this multiple of the minimum load.
- store_load_weight: cost of a token loaded from the shared store against computing it (0.1: the
  store's cost per block measured on the benchmark machine was far below a tenth of computing it).
Ties rotate with the request counter.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tandem.router.policies.base import candidates, rotation, token_load
from tandem.router.snapshot import Decision, Snapshot, WorkerLoad


@dataclass(frozen=True)
class PrefixAwareConfig:
    decode_weight: float = 1.0
    balance_abs_tokens: int = 8192
    balance_rel: float = 2.0
    store_load_weight: float = 0.1


def is_hotspot(load: float, min_load: float, cfg: PrefixAwareConfig) -> bool:
    return load - min_load > cfg.balance_abs_tokens and load > cfg.balance_rel * min_load


@dataclass(frozen=True)
class PrefixAware:
    config: PrefixAwareConfig = field(default_factory=PrefixAwareConfig)
    name: str = "prefix_aware"

    def choose(self, snap: Snapshot) -> Decision:
        cfg, req = self.config, snap.request
        ws = candidates(snap)
        loads = {w.worker_id: token_load(w, cfg.decode_weight) for w in ws}
        min_load = min(loads.values())
        cool = [w for w in ws if not is_hotspot(loads[w.worker_id], min_load, cfg)]

        def cost(w: WorkerLoad) -> float:
            held = max(w.cached_blocks, req.shared_blocks)
            uncached = max(0, req.num_prompt_tokens - req.block_size * held)
            loaded = req.block_size * max(0, req.shared_blocks - w.cached_blocks)
            return loads[w.worker_id] + uncached + cfg.store_load_weight * loaded

        rank = rotation(ws, req.seq)
        best = min(cool, key=lambda w: (cost(w), loads[w.worker_id], rank[w.worker_id]))
        longest_all = max(w.cached_blocks for w in ws)
        longest_cool = max(w.cached_blocks for w in cool)
        if req.shared_blocks > best.cached_blocks:
            reason = "store"
        elif longest_all > 0 and best.cached_blocks == longest_all:
            reason = "prefix"
        elif longest_all > longest_cool:
            reason = "hotspot"
        else:
            reason = "load"
        return Decision(best.worker_id, self.name, reason, {w.worker_id: cost(w) for w in cool})
