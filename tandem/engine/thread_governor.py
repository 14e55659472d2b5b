"""How many compute threads a CPU worker runs: all its cores while it has them, fewer while
another process takes some.

The compute threads (torch's intra-op pool and tandem's native kernels, one OpenMP team) meet at
a barrier after every parallel region, and spin briefly there (tandem/cli/cpu_threads.py). When
another busy process shares one of their cores, the thread on it gets only its time share, and
every barrier waits for it: a 2-thread decode ran at a third of its speed beside one busy
process on a 2-core host. One thread fewer then runs faster than all of them.

Policy (`ThreadPolicy`, pure): every `window_s` of running, the process's threads' run-queue wait
per second they ran (Linux schedstat) above `contended_ratio` means its cores are contended:
one thread fewer, down to one. A reduced count is held `probe_s`, then all threads are tried
again (a window at most); an idle window (the threads ran under `min_busy` of it per thread)
decides nothing. Mechanism (`ThreadGovernor`): reads /proc/self/task/*/schedstat and applies the
count with torch.set_num_threads, which the native kernels read per call; a host without
schedstat keeps the configured count.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tandem.config import ThreadGovernorConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CpuTimes:
    """Summed over the process's threads since they started: seconds on a CPU and on a run queue."""

    run_s: float
    wait_s: float


class ThreadPolicy:
    def __init__(self, max_threads: int, config: ThreadGovernorConfig) -> None:
        self.max_threads = max_threads
        self.config = config
        self.threads = max_threads
        self._last: tuple[float, CpuTimes] | None = None
        self._reduced_at: float | None = None

    def observe(self, now: float, times: CpuTimes) -> int:
        """The thread count from now on, given the process's CPU times read at `now`."""
        cfg = self.config
        if self._last is None:
            self._last = (now, times)
            return self.threads
        then, before = self._last
        if now - then < cfg.window_s:
            return self.threads
        self._last = (now, times)
        run, wait = times.run_s - before.run_s, times.wait_s - before.wait_s
        if self._reduced_at is not None and now - self._reduced_at >= cfg.probe_s:
            self.threads, self._reduced_at = self.max_threads, None   # try all of them again
        elif run >= cfg.min_busy * (now - then) * self.threads and wait > cfg.contended_ratio * run \
                and self.threads > 1:
            self.threads, self._reduced_at = self.threads - 1, now
        return self.threads


def read_cpu_times(task_dir: Path = Path("/proc/self/task")) -> CpuTimes | None:
    """This process's threads' CPU and run-queue times (schedstat: ns on a CPU, ns waiting, slices);
    None where the kernel does not report them."""
    run = wait = 0
    try:
        tasks = os.listdir(task_dir)
    except OSError:
        return None
    for tid in tasks:
        try:
            fields = (task_dir / tid / "schedstat").read_text().split()
        except OSError:
            continue   # a thread that ended meanwhile
        if len(fields) < 2:
            return None
        run, wait = run + int(fields[0]), wait + int(fields[1])
    return CpuTimes(run / 1e9, wait / 1e9) if tasks else None


class ThreadGovernor:
    """Ticked by the engine thread between steps; cheap except once a window."""

    def __init__(self, max_threads: int, config: ThreadGovernorConfig,
                 set_threads: Callable[[int], None],
                 read: Callable[[], CpuTimes | None] = read_cpu_times) -> None:
        self.policy = ThreadPolicy(max_threads, config)
        self._set_threads = set_threads
        self._read = read
        self._next = 0.0
        self.changes = 0

    @property
    def threads(self) -> int:
        return self.policy.threads

    def tick(self, now: float) -> None:
        if now < self._next:
            return
        self._next = now + self.policy.config.window_s
        times = self._read()
        if times is None:
            return
        before = self.policy.threads
        after = self.policy.observe(now, times)
        if after != before:
            self._set_threads(after)
            self.changes += 1
            log.info("compute threads %d -> %d (%s)", before, after,
                     "cores contended" if after < before else "trying all cores again")
