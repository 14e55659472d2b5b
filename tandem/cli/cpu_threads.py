"""The CPU a worker process may use: how many threads it runs, and how they wait.

A worker's compute threads (torch's intra-op pool and tandem's native kernels, both OpenMP) meet
at a barrier after every parallel region. With OpenMP's spinning wait, a thread whose core is
shared with another busy process is charged as CPU-bound by the kernel's scheduler and gets only
its time share, so every barrier waits for it: measured 28x slower with one busy process on a
2-core host. Waiting passively (`OMP_WAIT_POLICY=PASSIVE`) keeps the threads sleepers, which the
scheduler runs as soon as they wake. The policy is read once, when an OpenMP runtime loads, so it
is set before anything imports torch or the kernels; a value already in the environment wins.

Threads: at most the cores this process may run on (its CPU affinity, and its cgroup's CPU
quota when one is set, as in a container); more would time-share cores with each other.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import MutableMapping
from pathlib import Path

WAIT_POLICY_ENV = "OMP_WAIT_POLICY"
DEFAULT_WAIT_POLICY = "PASSIVE"


def set_wait_policy(env: MutableMapping[str, str]) -> None:
    """Passive waits for OpenMP threads unless the environment already chose a policy."""
    env.setdefault(WAIT_POLICY_ENV, DEFAULT_WAIT_POLICY)


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
