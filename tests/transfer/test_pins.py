from __future__ import annotations

import pytest

from tandem.transfer.pins import PinTable


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_confirm_releases_once_in_order():
    pins = PinTable(10.0, Clock())
    pins.offer("a", [1, 2])
    pins.offer("b", [3])
    assert pins.begin_read("a") == (1, 2)
    assert pins.finish("a", "confirmed")
    assert pins.drain() == []            # the reader is still open
    pins.end_read("a")
    assert pins.finish("b", "withdrawn")
    assert pins.drain() == ["a", "b"]
    assert pins.drain() == []
    assert pins.num_pinned() == 0 and pins.counts == {"confirmed": 1, "timeout": 0, "withdrawn": 1}
    assert pins.begin_read("a") is None and not pins.finish("a", "confirmed")


def test_timeout_waits_for_open_readers():
    clock = Clock()
    pins = PinTable(10.0, clock)
    pins.offer("a", [1])
    pins.offer("b", [2])
    assert pins.begin_read("a") == (1,)
    clock.t += 10.0
    assert pins.drain() == ["b"]          # "a" is being read: its bytes may be in flight
    assert pins.begin_read("b") is None
    pins.end_read("a")                    # the reader went away without confirming
    assert pins.drain() == ["a"]
    assert pins.counts["timeout"] == 2 and pins.num_readers() == 0


def test_read_after_deadline_is_refused_and_released():
    clock = Clock()
    pins = PinTable(1.0, clock)
    pins.offer("a", [5])
    clock.t += 1.5
    assert pins.begin_read("a") is None
    assert pins.drain() == ["a"]


def test_two_readers_release_after_the_last():
    pins = PinTable(10.0, Clock())
    pins.offer("a", [1])
    pins.begin_read("a")
    pins.begin_read("a")
    pins.finish("a", "confirmed")
    pins.end_read("a")
    assert pins.drain() == []
    pins.end_read("a")
    assert pins.drain() == ["a"]


def test_duplicate_offer_is_rejected():
    pins = PinTable(10.0, Clock())
    pins.offer("a", [1])
    with pytest.raises(ValueError, match="already offered"):
        pins.offer("a", [2])
