"""The thread governor: one thread fewer per window in which the process's threads waited for a
core, all of them again after the probe interval, nothing decided in idle windows; and the
schedstat reader on this machine's /proc."""

from __future__ import annotations

import os
import sys

import pytest

from tandem.config import ThreadGovernorConfig
from tandem.engine.thread_governor import CpuTimes, ThreadGovernor, ThreadPolicy, read_cpu_times, read_idle_s

CFG = ThreadGovernorConfig(window_s=1.0, contended_ratio=0.2, probe_s=10.0, min_busy=0.2)


class Clock:
    """CPU times that grow by (run, wait) per second for the threads now running."""

    def __init__(self) -> None:
        self.now, self.run, self.wait = 0.0, 0.0, 0.0

    def advance(self, seconds: float, run_per_s: float, wait_per_s: float) -> CpuTimes:
        self.now += seconds
        self.run += seconds * run_per_s
        self.wait += seconds * wait_per_s
        return CpuTimes(self.run, self.wait)


def test_contended_windows_take_threads_away_down_to_one_and_the_probe_gives_them_back():
    policy, clock = ThreadPolicy(3, CFG), Clock()
    assert policy.observe(clock.now, CpuTimes(0, 0)) == 3
    assert policy.observe(*_tick(clock, 2.0, 0.05)) == 3     # quiet: 2.5% waiting
    assert policy.observe(*_tick(clock, 2.0, 1.0)) == 2      # half of each second run, waited
    assert policy.observe(*_tick(clock, 1.6, 0.8)) == 1
    assert policy.observe(*_tick(clock, 1.0, 0.5)) == 1      # never below one
    for _ in range(8):                                       # one thread on a free core: no wait
        assert policy.observe(*_tick(clock, 1.0, 0.0)) == 1
    assert policy.observe(*_tick(clock, 1.0, 0.0)) == 3      # 10 s since the last cut: all again
    assert policy.observe(*_tick(clock, 2.0, 0.0)) == 3      # the other process left: they stay


def _contended_run(policy: ThreadPolicy, clock: Clock, windows: int) -> list[float]:
    """The times at which all threads were tried again while another process kept a core."""
    probes = []
    for _ in range(windows):
        before = policy.threads
        after = policy.observe(*_tick(clock, 2.0 if before == 2 else 1.0, 1.2 if before == 2 else 0.0))
        if after == 2 and before == 1:
            probes.append(clock.now)
    return probes


def test_probes_under_lasting_contention_cost_one_window_each_and_come_ever_less_often():
    policy, clock = ThreadPolicy(2, CFG), Clock()
    policy.observe(clock.now, CpuTimes(0, 0))
    probes = _contended_run(policy, clock, 250)
    assert policy.threads == 1
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    # each probe lasts one window; the reduced count then holds 10, 20, 40, then at most 80 s
    assert probes[0] == 11.0 and gaps == [21.0, 41.0, 81.0, 81.0], probes


def test_a_probe_that_holds_starts_the_interval_over():
    policy, clock = ThreadPolicy(2, CFG), Clock()
    policy.observe(clock.now, CpuTimes(0, 0))
    assert len(_contended_run(policy, clock, 40)) == 2          # probes at 11 s and 32 s failed
    while policy.threads == 1:                                 # the other process leaves
        policy.observe(*_tick(clock, 1.0, 0.0))
    assert policy.observe(*_tick(clock, 2.0, 0.0)) == 2         # all threads hold a quiet window
    assert _contended_run(policy, clock, 12) == [clock.now - 1.0]   # back: probed after 10 s again


def test_the_cores_given_up_sitting_idle_bring_the_threads_back_before_the_probe():
    policy = ThreadPolicy(2, CFG)
    policy.observe(0.0, CpuTimes(0, 0, idle_s=100.0))
    assert policy.observe(1.0, CpuTimes(2.0, 1.0, idle_s=100.0)) == 1    # contended: one core busy
    assert policy.observe(2.0, CpuTimes(3.0, 1.0, idle_s=100.1)) == 1    # the other process stays
    assert policy.observe(3.0, CpuTimes(4.0, 1.0, idle_s=100.9)) == 2    # it left: its core idles


def test_read_idle_s_sums_idle_and_iowait_of_the_given_cores(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  9 9 9 900 90 0 0 0 0 0\ncpu0 1 1 1 100 10 0 0 0 0 0\n"
                    "cpu1 1 1 1 200 20 0 0 0 0 0\nintr 5\n")
    hz = os.sysconf("SC_CLK_TCK")
    assert read_idle_s({1}, stat) == pytest.approx(220 / hz)
    assert read_idle_s({0, 1}, stat) == pytest.approx(330 / hz)
    assert read_idle_s({7}, stat) is None and read_idle_s({0}, tmp_path / "none") is None


def test_idle_and_short_windows_decide_nothing():
    policy, clock = ThreadPolicy(2, CFG), Clock()
    policy.observe(clock.now, CpuTimes(0, 0))
    assert policy.observe(*_tick(clock, 0.1, 0.1)) == 2      # idle: ran 5% of each thread's second
    clock.now += 0.5
    assert policy.observe(clock.now, CpuTimes(clock.run + 1, clock.wait + 1)) == 2   # under a window


def test_the_governor_reads_once_a_window_and_applies_changes():
    applied = []
    readings = iter([CpuTimes(0, 0), CpuTimes(2, 1), CpuTimes(3, 1)])
    gov = ThreadGovernor(2, CFG, applied.append, read=lambda: next(readings))
    gov.tick(0.0)
    gov.tick(0.5)                                # inside the window: no read
    gov.tick(1.0)                                # 1 s waited per 2 s run: contended
    assert applied == [1] and gov.threads == 1 and gov.changes == 1
    gov.tick(2.0)
    assert applied == [1]
    none = ThreadGovernor(2, CFG, applied.append, read=lambda: None)
    none.tick(0.0)
    none.tick(5.0)
    assert none.threads == 2 and applied == [1]  # no schedstat: the configured count


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux schedstat")
def test_read_cpu_times_sums_this_process_threads():
    before = read_cpu_times()
    sum(i * i for i in range(300_000))
    after = read_cpu_times()
    assert before is not None and after is not None
    assert after.run_s > before.run_s and after.wait_s >= before.wait_s >= 0
    assert after.idle_s is not None and after.idle_s >= before.idle_s


def test_bad_config_is_refused():
    with pytest.raises(ValueError):
        ThreadGovernorConfig(window_s=0)
    with pytest.raises(ValueError):
        ThreadGovernorConfig(probe_s=0.5, window_s=1.0)


def _tick(clock: Clock, run_per_s: float, wait_per_s: float) -> tuple[float, CpuTimes]:
    times = clock.advance(1.0, run_per_s, wait_per_s)
    return clock.now, times
