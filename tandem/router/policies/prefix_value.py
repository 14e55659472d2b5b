"""What a worker's prefix hit is worth, tier by tier: the load-versus-recompute cost model.

A block of the prompt that worker w can reuse saves computing `block_size` tokens, but a block
below the device must be loaded first. tandem/kvstore/cost.py decides the same trade on the
worker (it loads a tier's blocks only while that is cheaper than recomputing them):

    savings(block) = recompute(block) - load(block, tier)

In units of one computed prompt token (the unit of every load in tandem/router) that is

    value(block) = block_size * (1 - weight(tier)),   weight = load(block, tier) / recompute(block)

with weight 0 on the device. The prompt's leading blocks are walked once; each is credited at the
cheapest tier of w that holds the unbroken run up to it:

    device  block i < cached_blocks(w)       (the worker's own prefix cache, from its KV events)
    host    block i < host_blocks(w)         (its host-memory tier)
    disk    block i < disk_blocks(w)         (its local disk tier)
    store   block i < shared_blocks          (the shared store: every worker loads from it)

    value(w) = sum over the leading blocks of block_size * (1 - weight(best tier of block i))

capped at the prompt's length. A policy's cost of serving the request on w is then
`num_prompt_tokens - value(w)`: the tokens computed plus the loads, in computed-token units.

Weights: a worker that has tiers reports its own (EngineStats.kv_tier_weights: its CostModel's
measured seconds per block read from each tier over its measured seconds to compute a block),
and its hits are valued by them, so a tier the worker finds slower than recomputing is worth
nothing there, as it will not load it (without this, a prefill worker holding nothing of a
prompt looked as good as one holding it locally whenever the store had it, and then computed
the whole prompt: docs/benchmarks.md 19.6). Without a report (a worker without tiers, the
simulator), fixed settings (TierWeights). The store's 0.1 is the old store_load_weight (a
store read measured on the benchmark machine cost well under a tenth of computing its block);
host and disk keep the proportions of cost.py's first guesses for one block read (4 GB/s, 1 GB/s
and 0.5 GB/s plus a per-call overhead: for a 48 KiB block of the demo model to a 2 MiB block of
an 8B model, host reads cost 0.08-0.13 and disk reads 0.4-0.5 of a store read): host 0.01,
disk 0.04, store 0.1. An equal hit is thus worth most on the device, then host, disk, store;
never less than nothing.

Only the device and the store are reported to the gateway today (KV events, tandem/router/
prefix_index.py); host and disk runs are filled by the simulator, which sees its workers' tiers.
"""

from __future__ import annotations

from dataclasses import dataclass

from tandem.router.snapshot import RequestInfo, WorkerLoad


@dataclass(frozen=True)
class TierWeights:
    """Cost of loading one token's KV from a tier, against computing it (device: 0); fields in
    the order of tandem.types.KV_TIERS (a worker's report is read by position)."""

    host: float = 0.01
    disk: float = 0.04
    store: float = 0.1


def prefix_value(w: WorkerLoad, req: RequestInfo, weights: TierWeights) -> float:
    """Tokens of `req`'s prompt that w need not compute, loads charged at their tier weight
    (w's own where it reported them, else `weights`)."""
    if w.tier_weights is not None:
        weights = TierWeights(*w.tier_weights)
    bs = req.block_size
    runs = sorted(((0.0, w.cached_blocks), (weights.host, w.host_blocks),
                   (weights.disk, w.disk_blocks), (weights.store, req.shared_blocks)))
    value, done = 0.0, 0          # blocks credited so far (a prefix of the prompt)
    for weight, run in runs:      # cheapest tier first: each covers what the cheaper ones did not
        if run > done:
            value += bs * (run - done) * (1.0 - min(1.0, max(0.0, weight)))
            done = run
    return min(value, float(req.num_prompt_tokens))


def uncached_cost(w: WorkerLoad, req: RequestInfo, weights: TierWeights) -> float:
    """What serving the prompt on w costs in computed-token units: computing plus loading."""
    return req.num_prompt_tokens - prefix_value(w, req, weights)
