"""The planner's policy: moves a worker one step between the prefill and decode pools when one
latency target is missed and the other has room. A pure function of one round's snapshot; the
driver (tandem/planner/driver.py) measures, calls it every round and hands its switch to an executor.

Inputs, per planning round (every `interval_s`): the gateway's p90 time to first token and p90
inter-token latency over the round (from its own histograms, as its clients see them), how many
samples those are, and the workers as the router sees them (role, health, queued prefill tokens,
decode context, open requests). Targets: `slo_ttft_ms` and `slo_itl_ms`.

Roles form a ladder, decode - both - prefill, and a switch moves one worker one rung. A role=both
worker in a disaggregated fleet serves whole requests: the gateway chooses it among the decode
workers and it computes the prompt itself (tandem/gateway/pd_flow.py), so it is half a decode
worker and half a prefill worker, and moving a worker in two steps lets each half show its effect.

Rule (one switch at most per round, none within `cooldown_s` of the last one, none on fewer
than `min_samples` samples of the metric that triggers it, and never emptying a pool):
- TTFT over its target while ITL is within `margin` x its target: prefill is short of capacity
  and decode can spare some. In a disaggregated fleet (a live prefill and a live decode worker)
  a both worker moves to prefill (the one with the least decode context: fewest streams to
  drain); without one, the decode worker with the least decode context moves to both, if
  another decode worker stays. A fleet with no live prefill worker (its decode workers serve
  whole requests) has no ladder yet: that decode worker moves straight to prefill.
- ITL over its target while TTFT is within `margin` x its target: the reverse. A both worker
  moves to decode (the one with the fewest queued prefill tokens); without one, the prefill
  worker with the fewest queued prefill tokens moves to both if another prefill worker stays,
  or straight to decode when no decode worker is live.
- Both over their targets: no move can fix both (more workers are needed); both within: nothing.
A fleet of both workers alone (colocated) is never changed: a prefill worker there would idle
(the gateway serves whole requests on both workers while no decode worker is live).
`margin` < 1 keeps the move from pushing the other metric straight over its target, and the
cooldown lets the moved worker's effect show before the next decision (no flapping).

A metric with no target (None) counts as met. A move is a `RoleSwitch`; its executor drains the
worker (no new requests), waits for its requests and KV handoffs to finish and changes its role,
so no request is lost: `tandem up` restarts its own workers with the new --role
(tandem/launcher/role_switch.py); the gateway switches self-registered workers in-process over
their POST /internal/role (tandem/gateway/role_executor.py; a worker started without a KV
transport can become both but not prefill or decode). A worker being switched is draining, so it
counts in no pool until its switch ends: the pool rules above hold throughout.
"""

from __future__ import annotations

from dataclasses import dataclass

from tandem.router.snapshot import WorkerLoad


@dataclass(frozen=True)
class PlannerConfig:
    slo_ttft_ms: float | None = None   # --slo-ttft-ms: p90 time to first token target
    slo_itl_ms: float | None = None    # --slo-itl-ms: p90 inter-token latency target
    interval_s: float = 10.0           # one planning round
    cooldown_s: float = 60.0           # no switch this soon after the last one
    margin: float = 0.8                # the metric that gives a worker up must be under margin x target
    min_samples: int = 20              # samples of the triggering metric in the round

    @property
    def enabled(self) -> bool:
        return self.slo_ttft_ms is not None or self.slo_itl_ms is not None


@dataclass(frozen=True)
class Measured:
    """One round's latencies (None: no sample)."""

    ttft_p90_ms: float | None
    itl_p90_ms: float | None
    ttft_samples: int = 0
    itl_samples: int = 0


@dataclass(frozen=True)
class RoleSwitch:
    worker_id: str
    from_role: str
    to_role: str
    reason: str    # "ttft" (prefill short of capacity) or "itl" (decode short of capacity)


# every (from_role, to_role, reason) `plan` can return (see `_rung`): a metric counting switches
# starts each at 0, so a dashboard sees the series before the first switch
SWITCH_KINDS = (("both", "prefill", "ttft"), ("decode", "both", "ttft"), ("decode", "prefill", "ttft"),
                ("both", "decode", "itl"), ("prefill", "both", "itl"), ("prefill", "decode", "itl"))


def _over(value: float | None, target: float | None) -> bool:
    return target is not None and value is not None and value > target


def _within(value: float | None, target: float | None, margin: float) -> bool:
    return target is None or value is None or value <= margin * target


def _by_context(w: WorkerLoad) -> tuple[int, int]:
    return w.decode_tokens, w.in_flight        # the fewest streams to drain first


def _by_queue(w: WorkerLoad) -> tuple[int, int]:
    return w.prefill_tokens, w.in_flight       # the least queued prefill first


def plan(m: Measured, workers: tuple[WorkerLoad, ...], cfg: PlannerConfig,
         since_last_switch_s: float | None) -> RoleSwitch | None:
    """The switch to make now, if any; `since_last_switch_s` is None before the first one."""
    if not cfg.enabled or (since_last_switch_s is not None and since_last_switch_s < cfg.cooldown_s):
        return None
    live = [w for w in workers if w.healthy and not w.draining]
    prefill, both, decode = ([w for w in live if w.role == role] for role in ("prefill", "both", "decode"))
    disaggregated = bool(prefill and decode)
    if (_over(m.ttft_p90_ms, cfg.slo_ttft_ms) and m.ttft_samples >= cfg.min_samples
            and _within(m.itl_p90_ms, cfg.slo_itl_ms, cfg.margin)):
        switch = _rung(both, decode, "decode", "prefill", disaggregated, _by_context, "ttft")
        if switch is not None:
            return switch
    if (_over(m.itl_p90_ms, cfg.slo_itl_ms) and m.itl_samples >= cfg.min_samples
            and _within(m.ttft_p90_ms, cfg.slo_ttft_ms, cfg.margin)):
        return _rung(both, prefill, "prefill", "decode", disaggregated, _by_queue, "itl")
    return None


def _rung(both: list[WorkerLoad], giving: list[WorkerLoad], from_role: str, to_role: str,
          disaggregated: bool, key, reason: str) -> RoleSwitch | None:
    """One rung towards `to_role`: a both worker the rest of the way (in a disaggregated fleet),
    else a worker of the pool that gives (`from_role`) to both, or straight to `to_role` when the
    fleet has no live worker of `to_role` yet; never the pool's last worker. `key` picks the worker."""
    if both and disaggregated:
        return RoleSwitch(min(both, key=key).worker_id, "both", to_role, reason)
    if len(giving) > 1:
        return RoleSwitch(min(giving, key=key).worker_id, from_role, "both" if disaggregated else to_role, reason)
    return None
