"""Time of one engine step, of a KV handoff and of a tier load, from FLOPs and bytes.

A step is the list of sequences it carries, each `(new_tokens, context_before)`; T is the sum
of new tokens, S the number of sequences, `sampled` how many of them produce a token.

    flops  = 2 * active_params * T + 2 * hidden * vocab * sampled                  (matrix products)
           + sum_seq 2 * layers * heads * (qk + v) * new * (context_before + (new + 1) / 2)  (attention)
    bytes  = dense_params * weight_bytes + [sampled] lm_head                        (weights read once)
           + moe_layers * distinct(T) * expert_params * expert_weight_bytes         (experts touched)
           + sum_seq (context_before + new) * kv_bytes_per_token                    (KV read + written)
    distinct(T) = E * (1 - (1 - k/E)^T)    experts hit by T tokens routed uniformly at random
    compute = flops / (devices * flops_peak * mfu);  memory = bytes / (devices * mem_bw * mbu)
    step    = step_overhead + layers * layer_overhead + S * seq_overhead
              + max(compute, memory) + (1 - overlap) * min(compute, memory)

So prefill is compute-bound, decode memory-bound (weights, experts and KV read each step), and a
decode step carrying a prefill chunk costs the chunk's compute on top of the streams' reads (the
inter-token stall that disaggregation removes). A KV handoff moves the prompt's KV over the
interconnect: latency + tokens * kv_bytes_per_token / (devices * interconnect_bw); a host-tier
load the same over the host link; a shared-store load over the interconnect.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tandem.config import CPU_KV_CACHE_BYTES
from tandem.sim.hardware import Accelerator
from tandem.sim.model_spec import ModelSpec


@dataclass(frozen=True)
class StepWork:
    """What a step costs before it is turned into time (also the calibration's features)."""

    flops: float
    bytes: float
    seqs: int


@dataclass(frozen=True)
class CostModel:
    model: ModelSpec
    accel: Accelerator
    devices: int = 1                     # devices per worker (TP/EP inside a node)
    kv_cache_bytes: float | None = None  # overrides the KV memory left next to the weights

    def work(self, seqs: Sequence[tuple[int, int]], sampled: int) -> StepWork:
        m = self.model
        total = sum(n for n, _ in seqs)
        flops = 2.0 * m.active_params() * total + 2.0 * m.hidden * m.vocab * sampled
        nbytes = m.dense_params() * m.weight_bytes + (m.hidden * m.vocab * m.weight_bytes if sampled else 0.0)
        kvpt = m.kv_bytes_per_token()
        for n, ctx in seqs:
            qk, v = m.attn_dims(decode=n == 1)
            flops += 2.0 * m.num_layers * m.num_heads * (qk + v) * n * (ctx + (n + 1) / 2)
            nbytes += (ctx + n) * kvpt
        if m.is_moe and total:
            e, k = m.num_experts, m.top_k
            distinct = e * (1.0 - (1.0 - k / e) ** total)
            nbytes += m.moe_layers * distinct * m.expert_params() * m.expert_weight_bytes
        return StepWork(flops, nbytes, len(seqs))

    def time(self, w: StepWork) -> float:
        a = self.accel
        compute = w.flops / (self.devices * a.flops * a.mfu)
        memory = w.bytes / (self.devices * a.mem_bw * a.mbu)
        hi, lo = max(compute, memory), min(compute, memory)
        return (a.step_overhead_s + self.model.num_layers * a.layer_overhead_s + w.seqs * a.seq_overhead_s
                + hi + (1.0 - a.overlap) * lo)

    def step_time(self, seqs: Sequence[tuple[int, int]], sampled: int) -> float:
        """Seconds for one step; `seqs` is ((new_tokens, context_before), ...)."""
        if not seqs:
            return 0.0
        return self.time(self.work(seqs, sampled))

    def handoff_time(self, tokens: int) -> float:
        """Seconds to pull `tokens` tokens' KV from a prefill worker (0 tokens: nothing to pull)."""
        if tokens <= 0:
            return 0.0
        a = self.accel
        return a.interconnect_latency_s + tokens * self.model.kv_bytes_per_token() / (self.devices * a.interconnect_bw)

    def host_load_time(self, tokens: int) -> float:
        a = self.accel
        return 0.0 if tokens <= 0 else tokens * self.model.kv_bytes_per_token() / (self.devices * a.host_bw)

    def store_load_time(self, tokens: int) -> float:
        return self.handoff_time(tokens)

    def kv_capacity_tokens(self) -> int:
        """Tokens of KV a worker holds: its KV memory, or what the weights leave of its devices
        (on the cpu, which has no memory figure: tandem's default 512 MiB)."""
        if self.kv_cache_bytes is not None:
            free = self.kv_cache_bytes
        elif self.accel.memory_bytes == 0:   # the cpu: tandem serve's default KV memory
            free = CPU_KV_CACHE_BYTES
        else:
            a = self.accel
            free = self.devices * a.memory_bytes * a.memory_utilization - self.model.weight_bytes_total()
        if free <= 0:
            raise ValueError(f"{self.model.name} ({self.model.weight_bytes_total() / 1e9:.0f} GB of weights) "
                             f"does not fit {self.devices} x {self.accel.name}: raise --devices")
        return int(free / self.model.kv_bytes_per_token())
