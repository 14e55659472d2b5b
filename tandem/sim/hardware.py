"""Accelerator presets: what one device can compute, read and send, and how much of it a serving
engine reaches.

A worker is `devices` of one kind (tensor/expert parallel inside a node); the cost model scales
FLOPs, bandwidth and memory by that count. Peak figures are the vendors' dense bf16 numbers
(sparsity off); `mfu` / `mbu` are the fractions of peak compute and memory bandwidth a serving
engine reaches on large steps (typical published figures for tuned engines, not measurements of
tandem), `overlap` how far compute and memory time overlap in one step (1: roofline,
time = max; 0: additive, time = sum), and the overheads the fixed cost of one step, of each
sequence in it (scheduling, sampling) and of each layer (kernel launches, the tensor-parallel
all-reduces: ~150 us per layer on 8 GPUs, which puts a 61-layer model's small decode steps at
~10 ms before any byte is read).

The "cpu" preset is this machine as tandem runs on it (one core, one torch thread, bfloat16):
its constants are not vendor figures but fitted from measured step times
(tandem/sim/calibrate.py; benchmarks/sim/measure_cpu.py), with efficiencies folded in (mfu = mbu
= 1 on fitted effective rates).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

GB = 1e9


@dataclass(frozen=True)
class Accelerator:
    name: str
    flops: float                  # dense bf16 FLOP/s of one device (peak, or effective for cpu)
    mem_bw: float                 # device memory bytes/s of one device
    memory_bytes: float           # device memory of one device
    interconnect_bw: float        # bytes/s one device sends to another worker (RDMA NIC / TCP)
    interconnect_latency_s: float  # one transfer's fixed cost (handshake, confirm round trip)
    host_bw: float                # bytes/s between device and host memory (host tier loads)
    mfu: float = 0.5
    mbu: float = 0.7
    overlap: float = 1.0          # 1: step time = max(compute, memory); 0: their sum
    step_overhead_s: float = 0.0  # fixed cost of one step
    seq_overhead_s: float = 0.0   # cost of each sequence in a step
    layer_overhead_s: float = 0.0  # cost of each layer in a step (launches, TP all-reduces)
    memory_utilization: float = 0.9  # share of device memory the engine may use (weights + KV)

    def scaled(self, **changes: float) -> "Accelerator":
        return replace(self, **changes)


# H100 SXM: 989 TFLOP/s bf16 dense, 80 GB HBM3 at 3.35 TB/s, one 400 Gb/s NIC per GPU, PCIe 5
H100 = Accelerator("h100", flops=989e12, mem_bw=3.35e12, memory_bytes=80 * GB, interconnect_bw=50 * GB,
                   interconnect_latency_s=50e-6, host_bw=50 * GB, step_overhead_s=2e-3, seq_overhead_s=5e-6,
                   layer_overhead_s=150e-6)
# H200: the H100's compute with 141 GB HBM3e at 4.8 TB/s
H200 = replace(H100, name="h200", mem_bw=4.8e12, memory_bytes=141 * GB)
# B200: 2.25 PFLOP/s bf16 dense, 180 GB HBM3e at 8 TB/s, one 800 Gb/s NIC per GPU
B200 = Accelerator("b200", flops=2250e12, mem_bw=8e12, memory_bytes=180 * GB, interconnect_bw=100 * GB,
                   interconnect_latency_s=50e-6, host_bw=64 * GB, step_overhead_s=2e-3, seq_overhead_s=5e-6,
                   layer_overhead_s=120e-6)
# this machine (one core, one thread, bfloat16, tandem's engine): fitted by tandem/sim/calibrate.py
# on 2026-11-25 08:42 UTC (benchmarks/sim/results/cpu_calibration.json; docs/benchmarks.md 11.1);
# interconnect: the built-in TCP transport on loopback (docs/benchmarks.md section 5: ~2 GB/s on
# 16 MiB pulls, ~1 ms per pull)
CPU = Accelerator("cpu", flops=1.076e+10, mem_bw=7.703e+09, memory_bytes=0.0, interconnect_bw=2 * GB,
                  interconnect_latency_s=1e-3, host_bw=4 * GB, mfu=1.0, mbu=1.0, overlap=0.0,
                  step_overhead_s=0, seq_overhead_s=0.0009255, memory_utilization=1.0)

ACCELERATORS = {a.name: a for a in (H100, H200, B200, CPU)}


def accelerator(name: str) -> Accelerator:
    if name not in ACCELERATORS:
        raise ValueError(f"unknown accelerator {name!r}; choose one of {', '.join(ACCELERATORS)}")
    return ACCELERATORS[name]
