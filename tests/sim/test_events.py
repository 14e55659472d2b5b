import pytest

from tandem.sim.events import EventLoop


def test_events_run_in_time_then_insertion_order():
    loop, seen = EventLoop(), []
    loop.at(2.0, lambda: seen.append("b"))
    loop.at(1.0, lambda: seen.append("a"))
    loop.at(2.0, lambda: seen.append("c"))
    loop.at(1.0, lambda: loop.after(0.0, lambda: seen.append("a2")))   # same time, after those queued
    loop.run()
    assert seen == ["a", "a2", "b", "c"]
    assert loop.now == 2.0 and loop.processed == 5


def test_no_event_before_the_clock_and_run_until():
    loop, seen = EventLoop(), []
    loop.at(1.0, lambda: seen.append(1))
    loop.at(5.0, lambda: seen.append(5))
    loop.run(until=2.0)
    assert seen == [1] and loop.pending() == 1
    with pytest.raises(ValueError):
        loop.at(0.5, lambda: None)
