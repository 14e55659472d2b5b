"""One OpenMP team per CPU worker process: the engine thread's.

libgomp (the OpenMP runtime of torch's CPU builds and of tandem's native kernels) gives every
thread that starts a parallel region a team of its own, kept after the region, and counts the
threads of all teams. Once they outnumber the process's cores, every barrier of every team spins
only ~100 times before it sleeps (libgomp's "throttled" spin count, whatever GOMP_SPINCOUNT says;
tandem/cli/cpu_threads.py). A served worker loads its model on one thread and steps on another,
so it held two teams, and each of a step's few hundred barriers cost a wake-up: a 64-request
decode step took 29 ms served against 19 ms offline on a 2-vCPU Zen 4 (docs/benchmarks.md 20).

So a worker's other threads compute alone: `compute_alone()` sets the calling thread's OpenMP
thread count to 1 (its later parallel regions, torch's and the native kernels', run on it alone)
and gives back the team it started, if any. torch's own count (torch.set_num_threads: what a new
thread starts with) is left to the engine thread.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

_OMP_PAUSE_SOFT = 1   # omp_pause_resource_t: threads freed, state kept


@functools.cache
def _openmp() -> tuple[ctypes.CDLL, bool] | None:
    """The OpenMP runtime this process loaded (with torch), and whether it is libgomp; None when
    none is loaded or the runtime is not found (not Linux)."""
    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return None
    for line in maps:
        fields = line.split(maxsplit=5)   # address perms offset dev inode [path]
        name = os.path.basename(fields[5]) if len(fields) == 6 else ""
        if name.startswith(("libgomp", "libiomp", "libomp")) and ".so" in name:
            try:
                return ctypes.CDLL(fields[5]), name.startswith("libgomp")
            except OSError:
                return None
    return None


def compute_alone() -> bool:
    """The calling thread's parallel regions run on it alone from now on, and the OpenMP team it
    started (if any) is freed. Call it on every thread of a CPU worker that runs torch besides
    the engine thread. False where the runtime is not found (nothing changed)."""
    import torch

    torch.get_num_threads()   # torch sets a thread's count at its first use: let it happen first
    runtime = _openmp()
    if runtime is None:
        return False
    lib, is_gomp = runtime
    lib.omp_set_num_threads(ctypes.c_int(1))
    # libgomp frees the calling thread's team only; LLVM's runtime would pause every thread's
    if is_gomp and hasattr(lib, "omp_pause_resource_all"):
        if lib.omp_pause_resource_all(ctypes.c_int(_OMP_PAUSE_SOFT)) != 0:
            log.debug("omp_pause_resource_all refused (inside a parallel region?)")
    return True
