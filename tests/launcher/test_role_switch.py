import signal

from tandem.launcher.cluster import ProcSpec, worker_proc
from tandem.launcher.role_switch import RoleSwitcher, with_role

GW = "http://127.0.0.1:8000"


class FakeCluster:
    def __init__(self):
        self.procs = [worker_proc("prefill-0", "/m", "prefill", "127.0.0.1", 9001, (0,)),
                      worker_proc("decode-1", "/m", "decode", "127.0.0.1", 9002, (1,)),
                      worker_proc("decode-2", "/m", "decode", "127.0.0.1", 9003, (1,)),
                      ProcSpec("gateway", ("gw",), GW, None)]
        self.events = []

    def kill(self, name, sig=signal.SIGKILL):
        self.events.append(("kill", name, sig))

    def start(self, name=None):
        self.events.append(("start", name, next(p.role for p in self.procs if p.name == name)))


class FakeHTTP:
    def __init__(self):
        self.planner = {"enabled": True, "seq": 0, "switch": None}
        self.stats = {"num_running": 1, "num_waiting": 0, "num_blocks_free": 10, "num_blocks_total": 10}
        self.posts = []

    def get(self, url):
        return self.planner if url == GW + "/internal/planner" else self.stats

    def post(self, url, body):
        self.posts.append((url, body))
        return {"ok": True}


class Clock:
    t = 0.0

    def __call__(self):
        return self.t


def make(timeout=120.0):
    cluster, http, clock, lines = FakeCluster(), FakeHTTP(), Clock(), []
    sw = RoleSwitcher(cluster, GW, http.get, http.post, poll_s=2.0, drain_timeout_s=timeout,
                      clock=clock, log=lines.append)
    return cluster, http, clock, lines, sw


def switch(seq, worker="http://127.0.0.1:9003", frm="decode", to="prefill"):
    return {"enabled": True, "seq": seq,
            "switch": {"worker_id": worker, "from_role": frm, "to_role": to, "reason": "ttft"}}


def test_drain_wait_for_idle_then_restart_with_the_new_role():
    cluster, http, clock, lines, sw = make()
    sw.step()
    assert http.posts == [] and sw.draining is None      # nothing published yet
    http.planner = switch(1)
    clock.t = 1.0
    sw.step()
    assert http.posts == []                               # polls every 2 s
    clock.t = 2.0
    sw.step()
    assert http.posts == [(GW + "/internal/drain", {"url": "http://127.0.0.1:9003"})]
    sw.step()                                             # still running a request
    assert cluster.events == []
    http.stats = dict(http.stats, num_running=0)
    sw.step()
    assert cluster.events == [("kill", "decode-2", signal.SIGTERM), ("start", "decode-2", "prefill")]
    new = cluster.procs[2]
    assert new.role == "prefill" and new.cmd[new.cmd.index("--role") + 1] == "prefill"
    assert new.url == "http://127.0.0.1:9003" and new.cores == (1,)
    assert lines == ["tandem up: planner: draining decode-2 (http://127.0.0.1:9003) to switch it "
                     "decode -> prefill (ttft)", "tandem up: planner: decode-2 restarted as prefill"]
    clock.t = 10.0
    sw.step()                                             # the same switch is not done twice
    assert len(cluster.events) == 2 and sw.switches == 1


def test_held_kv_blocks_keep_it_draining_until_the_timeout():
    cluster, http, clock, lines, sw = make(timeout=30.0)
    http.planner = switch(1)
    http.stats = {"num_running": 0, "num_waiting": 0, "num_blocks_free": 8, "num_blocks_total": 10}
    sw.step()
    clock.t = 30.0
    sw.step()
    assert cluster.events == []
    clock.t = 30.1
    sw.step()
    assert [e[0] for e in cluster.events] == ["kill", "start"]
    assert lines[-1] == "tandem up: planner: decode-2 restarted as prefill (drain timed out)"


def test_a_switch_of_a_worker_not_ours_or_already_switched_is_skipped():
    cluster, http, clock, lines, sw = make()
    http.planner = switch(3, worker="http://10.0.0.9:9000")
    sw.step()
    assert http.posts == [] and sw.done_seq == 3
    http.planner = switch(4, worker="http://127.0.0.1:9001", frm="decode")   # it is a prefill worker
    clock.t = 2.0
    sw.step()
    assert http.posts == [] and sw.done_seq == 4


def test_with_role_changes_only_the_role():
    w = worker_proc("decode-1", "/m", "decode", "127.0.0.1", 9002, (1,), ("--dtype", "float32"))
    p = with_role(w, "prefill")
    assert [a for a in p.cmd if a not in w.cmd] == ["prefill"] and len(p.cmd) == len(w.cmd)


def test_the_worker_is_drained_at_every_gateway():
    cluster, http, clock, lines = FakeCluster(), FakeHTTP(), Clock(), []
    other = "http://127.0.0.1:8001"
    sw = RoleSwitcher(cluster, GW, http.get, http.post, poll_s=2.0, clock=clock, log=lines.append,
                      also_drain=(other,))
    http.planner = switch(1)
    sw.step()
    assert http.posts == [(GW + "/internal/drain", {"url": "http://127.0.0.1:9003"}),
                          (other + "/internal/drain", {"url": "http://127.0.0.1:9003"})]
