"""The CPU a worker process may use: how many threads it runs, and how they wait.

A worker's compute threads (torch's intra-op pool and tandem's native kernels, both OpenMP) meet
at a barrier after every parallel region, a few hundred per decode step. How they wait there:
- sleeping at once (`OMP_WAIT_POLICY=PASSIVE`) costs a wake-up per region: on a 2-vCPU VM, 42%
  of a 64-request decode's throughput (a wake-up crosses the hypervisor);
- spinning without end (`ACTIVE`, or libgomp's default of 300,000 spins) keeps a thread
  runnable, so when another busy process shares its core it gets only its time share and every
  barrier waits for it (measured 28x slower on an Intel Xeon, 3.5x on a Zen 4 VM).
So tandem spins briefly (GOMP_SPINCOUNT 10,000, tens of microseconds: enough to span the gaps
between a step's regions, the quiet speed of spinning) and leaves contention to the served
worker's thread governor (tandem/engine/thread_governor.py), which runs one thread fewer while
its threads wait for a core. The spin count holds only while the process's OpenMP teams hold no
more threads than it has cores: a served worker keeps one team (tandem/compute_threads.py). The
runtime reads these once, when it loads, so they are set before anything imports torch or the
kernels; a value already in the environment wins, and `OMP_WAIT_POLICY` set there makes libgomp
ignore the spin count.

Threads: at most the cores this process may run on (its CPU affinity, and its cgroup's CPU
quota when one is set, as in a container); more would time-share cores with each other.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import MutableMapping
from pathlib import Path

SPIN_COUNT_ENV = "GOMP_SPINCOUNT"
DEFAULT_SPIN_COUNT = "10000"


def set_wait_policy(env: MutableMapping[str, str]) -> None:
    """A brief spin for OpenMP threads at their barriers unless the environment chose one."""
    env.setdefault(SPIN_COUNT_ENV, DEFAULT_SPIN_COUNT)


def cgroup_cpu_limit(cgroup_root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Whole CPUs the cgroup's quota allows (cgroup v2 `cpu.max`, v1 `cpu.cfs_quota_us`), rounded
    up; None without a quota."""
    v2 = cgroup_root / "cpu.max"
    try:
        quota, period = v2.read_text().split()[:2]
        return None if quota == "max" else max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((cgroup_root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((cgroup_root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota_us <= 0 or period_us <= 0 else max(1, math.ceil(quota_us / period_us))


def usable_cores(affinity: set[int] | None = None, cgroup_limit: int | None = None) -> int:
    """Cores this process may run on: its affinity mask, capped by its cgroup's quota."""
    cores = len(affinity if affinity is not None else os.sched_getaffinity(0))
    limit = cgroup_limit if cgroup_limit is not None else cgroup_cpu_limit()
    return max(1, min(cores, limit) if limit else cores)


def threads_arg(text: str, usable: int | None = None) -> int:
    """`--threads N`: 1..usable cores, else a usage error naming the cores the process has."""
    have = usable if usable is not None else usable_cores()
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of threads: {text!r}") from None
    if not 1 <= value <= have:
        raise argparse.ArgumentTypeError(
            f"{value} threads: this process may use {have} core(s) (CPU affinity "
            f"{sorted(os.sched_getaffinity(0))}, cgroup quota {cgroup_cpu_limit() or 'none'}); "
            f"give 1..{have}")
    return value
