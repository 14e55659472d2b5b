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
