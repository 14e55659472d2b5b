"""The planner's driver over fakes: scripted measurements, workers set by the test, an executor
that records what it was handed and finishes when told."""

from dataclasses import dataclass

from tandem.planner.driver import PlannedSwitch, PlannerDriver, TrackedLoads
from tandem.planner.policy import Measured, PlannerConfig, RoleSwitch
from tandem.router.load_tracker import LoadTracker
from tandem.router.snapshot import WorkerLoad

CFG = PlannerConfig(slo_ttft_ms=1000, slo_itl_ms=50, cooldown_s=60, margin=0.8, min_samples=10)
SLOW_TTFT = Measured(ttft_p90_ms=1500, itl_p90_ms=30, ttft_samples=20, itl_samples=400)
FEW = Measured(ttft_p90_ms=1500, itl_p90_ms=30, ttft_samples=5, itl_samples=400)


class Script:
    """Latencies: one scripted measurement per round."""

    def __init__(self, *measured: Measured) -> None:
        self.left = list(measured)

    def advance(self) -> Measured:
        return self.left.pop(0)


class Fleet:
    """Loads: the workers as the test sets them."""

    def __init__(self, *workers: WorkerLoad) -> None:
        self.workers = list(workers)

    def loads(self) -> tuple[WorkerLoad, ...]:
        return tuple(self.workers)


class Executor:
    def __init__(self) -> None:
        self.started: list[RoleSwitch] = []
        self.busy = False
        self._on_done = None

    def start(self, switch, on_done) -> None:
        self.started.append(switch)
        self.busy, self._on_done = True, on_done

    def finish(self) -> None:
        self.busy = False
        self._on_done("done")


def w(wid, role, **kw):
    return WorkerLoad(worker_id=wid, url=wid, role=role, **kw)


def fleet():
    return Fleet(w("p0", "prefill", prefill_tokens=900), w("d0", "decode", decode_tokens=5000),
                 w("d1", "decode", decode_tokens=1000))


def test_rounds_plan_hand_over_wait_for_the_executor_and_count_the_cooldown_from_its_end():
    clock = [0.0]
    script, workers, ex = Script(FEW, SLOW_TTFT, SLOW_TTFT, SLOW_TTFT, SLOW_TTFT), fleet(), Executor()
    driver = PlannerDriver(CFG, script, workers, ex, clock=lambda: clock[0])

    clock[0] = 10.0        # TTFT missed, but on too few samples
    assert driver.round() is None and driver.measured == FEW and driver.seq == 0
    clock[0] = 20.0        # now on enough: the decode worker with the least context moves to both
    first = RoleSwitch("d1", "decode", "both", "ttft")
    assert driver.round() == PlannedSwitch(20.0, first, SLOW_TTFT)
    assert ex.started == [first] and driver.seq == 1 and driver.last_switch_at == 20.0
    clock[0] = 90.0        # past the cooldown, but the switch is under way: measured, not planned
    assert driver.round() is None and script.left == [SLOW_TTFT, SLOW_TTFT] and ex.started == [first]
    clock[0] = 95.0
    ex.finish()
    workers.workers[2] = w("d1", "both", decode_tokens=1000)
    assert driver.last_switch_at == 95.0
    clock[0] = 150.0       # 55 s after the end: cooldown
    assert driver.round() is None and driver.seq == 1
    clock[0] = 160.0       # the both worker goes the rest of the way
    second = RoleSwitch("d1", "both", "prefill", "ttft")
    assert driver.round() == PlannedSwitch(160.0, second, SLOW_TTFT) == driver.last
    assert ex.started == [first, second] and driver.seq == 2 and script.left == []


def test_without_an_executor_it_decides_and_records_and_the_cooldown_counts_from_the_decision():
    clock = [0.0]
    driver = PlannerDriver(CFG, Script(*[SLOW_TTFT] * 3), fleet(), clock=lambda: clock[0])
    sw = RoleSwitch("d1", "decode", "both", "ttft")
    assert driver.round() == PlannedSwitch(0.0, sw, SLOW_TTFT)
    clock[0] = 59.0
    assert driver.round() is None
    clock[0] = 60.0        # nothing carried it out: the same advice again
    assert driver.round() == PlannedSwitch(60.0, sw, SLOW_TTFT) and driver.seq == 2


def test_a_disabled_planner_measures_and_never_plans():
    driver = PlannerDriver(PlannerConfig(), Script(SLOW_TTFT), fleet(), Executor(), clock=lambda: 1000.0)
    assert driver.round() is None and driver.measured == SLOW_TTFT and driver.last is None


@dataclass
class Row:
    url: str
    role: str | None
    healthy: bool = True
    draining: bool = False


class Table:
    def __init__(self, *rows: Row) -> None:
        self.rows = list(rows)

    def all(self) -> list[Row]:
        return list(self.rows)


def test_tracked_loads_are_the_table_with_the_trackers_tokens():
    tracker = LoadTracker()
    tracker.dispatch("r1", "http://a", pending=300)
    tracker.dispatch("r2", "http://b", pending=0, context=700)
    loads = TrackedLoads(Table(Row("http://a", "prefill"), Row("http://b", None, draining=True),
                               Row("http://c", "decode", healthy=False)), tracker).loads()
    assert loads == (
        WorkerLoad("http://a", "http://a", "prefill", prefill_tokens=300, in_flight=1),
        WorkerLoad("http://b", "http://b", "both", draining=True, decode_tokens=700, in_flight=1),
        WorkerLoad("http://c", "http://c", "decode", healthy=False))
