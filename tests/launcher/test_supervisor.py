from tandem.launcher.supervisor import RestartPolicy, Supervisor


class FakeChildren:
    def __init__(self, names):
        self.running = set(names)
        self.dead: dict[str, int] = {}
        self.started: list[str] = []

    def kill(self, name, code=-9):
        self.dead[name] = code

    def exited(self):
        return {n: c for n, c in self.dead.items() if n in self.running}

    def forget(self, name):
        self.running.discard(name)
        self.dead.pop(name, None)

    def start(self, name=None):
        assert name is not None and name not in self.running
        self.running.add(name)
        self.started.append(name)


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def make(policy=RestartPolicy(initial_backoff_s=1.0, max_backoff_s=4.0, stable_after_s=60.0)):
    children, clock, lines = FakeChildren(["prefill-0", "decode-1", "gateway"]), Clock(), []
    sup = Supervisor(children, ["prefill-0", "decode-1", "gateway"], policy, clock, lines.append)
    return children, clock, lines, sup


def test_a_dead_worker_is_restarted_after_its_backoff_and_nothing_else_is_touched():
    children, clock, lines, sup = make()
    children.kill("prefill-0")
    sup.step()
    assert children.running == {"decode-1", "gateway"} and children.started == []
    assert lines == ["tandem up: prefill-0 exited with code -9; restarting in 1.0s (restart 1)"]
    clock.t += 0.9
    sup.step()
    assert children.started == []
    clock.t += 0.1
    sup.step()
    assert children.started == ["prefill-0"] and children.running == {"prefill-0", "decode-1", "gateway"}
    assert lines[-1] == "tandem up: prefill-0 restarted (restart 1)" and sup.total_restarts == 1


def test_backoff_doubles_up_to_the_cap_and_resets_once_stable():
    children, clock, lines, sup = make()
    waits = []
    for _ in range(4):               # dies again right after each restart
        children.kill("decode-1", 1)
        sup.step()
        waits.append(sup.records["decode-1"].restart_at - clock.t)
        clock.t = sup.records["decode-1"].restart_at
        sup.step()
    assert waits == [1.0, 2.0, 4.0, 4.0] and sup.records["decode-1"].restarts == 4
    clock.t += 60.0                  # up for a minute: the next death starts from 1 s again
    children.kill("decode-1", 1)
    sup.step()
    assert sup.records["decode-1"].restart_at - clock.t == 1.0
    assert lines[-1] == "tandem up: decode-1 exited with code 1; restarting in 1.0s (restart 5)"


def test_two_children_dying_together_are_both_restarted():
    children, clock, lines, sup = make()
    children.kill("gateway", -15)
    children.kill("prefill-0")
    sup.step()
    clock.t += 1.0
    sup.step()
    assert sorted(children.started) == ["gateway", "prefill-0"] and sup.total_restarts == 2
