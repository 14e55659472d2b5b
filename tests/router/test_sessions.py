"""The router's session table: bindings per pool, live counts, expiry, capacity."""

from tandem.router.sessions import SessionTable


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_bind_rebind_and_counts_per_pool():
    t = SessionTable()
    t.bind("both", "s1", "a")
    t.bind("both", "s2", "a")
    t.bind("prefill", "s1", "p")
    assert t.home("both", "s1") == "a" and t.home("prefill", "s1") == "p"
    assert t.home("decode", "s1") is None
    assert t.counts("both") == {"a": 2} and t.counts("prefill") == {"p": 1}
    t.bind("both", "s1", "b")   # moved: counted once, on its new worker
    assert t.home("both", "s1") == "b" and t.counts("both") == {"a": 1, "b": 1}
    assert len(t) == 3


def test_idle_sessions_expire_and_use_keeps_them():
    clock = Clock()
    t = SessionTable(idle_s=10.0, clock=clock)
    t.bind("both", "old", "a")
    clock.t = 6.0
    t.bind("both", "young", "b")
    clock.t = 9.0
    t.bind("both", "old", "a")     # a new request: live again, moved to the young end
    clock.t = 17.0                  # "young" last used at 6: expired; "old" at 9: live
    assert t.home("both", "young") is None and t.home("both", "old") == "a"
    assert t.counts("both") == {"a": 1}


def test_capacity_forgets_the_least_recently_used():
    t = SessionTable(capacity=2)
    for s, wkr in (("s1", "a"), ("s2", "b"), ("s3", "a")):
        t.bind("both", s, wkr)
    assert t.home("both", "s1") is None and t.counts("both") == {"a": 1, "b": 1}


def test_an_ended_session_leaves_the_table_and_its_workers_count():
    t = SessionTable()
    t.bind("both", "s1", "a")
    t.bind("both", "s2", "a")
    t.end("both", "s1")
    assert t.home("both", "s1") is None and t.counts("both") == {"a": 1} and len(t) == 1
    t.end("both", "never-bound")    # ignored
    t.end("prefill", "s2")          # another pool's binding: the "both" one stays
    assert t.home("both", "s2") == "a"


def test_a_resting_session_keeps_its_home_but_stops_counting_until_its_next_request():
    clock = Clock()
    t = SessionTable(idle_s=10.0, clock=clock)
    t.bind("prefill", "s1", "p")
    t.bind("decode", "s1", "d")
    t.bind("decode", "s2", "d")
    t.rest("s1")                    # every pool's binding rests
    assert t.home("prefill", "s1") == "p" and t.home("decode", "s1") == "d"
    assert t.counts("prefill") == {} and t.counts("decode") == {"d": 1}
    t.rest("s1")                    # twice: still uncounted once
    t.rest("never-bound")           # ignored
    assert t.counts("decode") == {"d": 1}
    t.bind("decode", "s1", "e")     # its next request: counted again, where it went
    assert t.counts("decode") == {"d": 1, "e": 1}
    t.rest("s2")
    clock.t = 11.0                  # a resting session's expiry does not uncount it again
    assert t.counts("decode") == {} and t.counts("prefill") == {} and len(t) == 0
    t.bind("both", "s3", "a")
    t.rest("s3")
    t.end("both", "s3")             # nor does its end
    assert t.counts("both") == {} and len(t) == 0
