"""How many compute threads a CPU worker runs: all its cores while it has them, fewer while
another process takes some.

The compute threads (torch's intra-op pool and tandem's native kernels, one OpenMP team) meet at
a barrier after every parallel region, and spin briefly there (tandem/cli/cpu_threads.py). When
another busy process shares one of their cores, the thread on it gets only its time share, and
every barrier waits for it: a 2-thread decode ran at a third of its speed beside one busy
process on a 2-core host. One thread fewer then runs faster than all of them.

Policy (`ThreadPolicy`, pure): every `window_s` of running, the process's threads' run-queue wait
per second they ran (Linux schedstat) above `contended_ratio` means its cores are contended:
one thread fewer, down to one. A reduced count comes back to all threads as soon as the cores it
gave up sit idle (the process's cores' idle time in /proc/stat over a window, at least
`idle_to_restore` of each core given up), and at the latest after the probe interval (a window at
most at full count, where idle time is not reported). The interval starts at `probe_s` and doubles,
up to `max_probe_s`, after each probe that found the cores still taken (a probe's window runs at
the contended speed, a third of it with spinning threads); it starts over once all threads hold a
window, or the cores given up sat idle. An idle window (the threads ran under `min_busy` of it per
thread) decides nothing. Mechanism (`ThreadGovernor`): reads the schedstat of
/proc/self/task/* and /proc/stat, and applies the count with torch.set_num_threads, which the
native kernels read per call; a host without schedstat keeps the configured count.
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
    """Summed over the process's threads since they started: seconds on a CPU and on a run queue;
    and the seconds the cores it may use sat idle since boot (None: not reported)."""

    run_s: float
    wait_s: float
    idle_s: float | None = None


class ThreadPolicy:
    def __init__(self, max_threads: int, config: ThreadGovernorConfig) -> None:
        self.max_threads = max_threads
        self.config = config
        self.threads = max_threads
        self._last: tuple[float, CpuTimes] | None = None
        self._reduced_at: float | None = None
        self._probe_s = config.probe_s      # the current interval before all threads are tried again
        self._probing = False               # all threads came back by the interval, not yet confirmed

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
        idle = None if times.idle_s is None or before.idle_s is None else times.idle_s - before.idle_s
        given_up = self.max_threads - self.threads
        freed = idle is not None and idle >= cfg.idle_to_restore * given_up * (now - then)
        contended = run >= cfg.min_busy * (now - then) * self.threads and wait > cfg.contended_ratio * run
        if self._reduced_at is not None and (freed or now - self._reduced_at >= self._probe_s):
            self._probing = not freed
            if freed:
                self._probe_s = cfg.probe_s
            self.threads, self._reduced_at = self.max_threads, None   # try all of them again
        elif contended and self.threads > 1:
            if self._probing:   # the cores are still taken: wait longer before the next probe
                self._probe_s = min(2 * self._probe_s, cfg.max_probe_s)
            self.threads, self._reduced_at, self._probing = self.threads - 1, now, False
        elif self._probing and run >= cfg.min_busy * (now - then) * self.threads:
            self._probe_s, self._probing = cfg.probe_s, False           # all threads held a window
        return self.threads


def read_idle_s(cores: set[int], stat: Path = Path("/proc/stat")) -> float | None:
    """Seconds the given cores sat idle since boot (idle and iowait of their `cpuN` lines)."""
    try:
        lines = stat.read_text().splitlines()
    except OSError:
        return None
    ticks, found = 0, 0
    for line in lines:
        name, _, rest = line.partition(" ")
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cores:
            fields = rest.split()
            ticks += int(fields[3]) + int(fields[4])
            found += 1
    return ticks / os.sysconf("SC_CLK_TCK") if found else None


def read_cpu_times(task_dir: Path = Path("/proc/self/task")) -> CpuTimes | None:
    """This process's threads' CPU and run-queue times (schedstat: ns on a CPU, ns waiting, slices)
    and its cores' idle time; None where the kernel does not report the threads' times."""
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
    if not tasks:
        return None
    return CpuTimes(run / 1e9, wait / 1e9, read_idle_s(os.sched_getaffinity(0)))


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
