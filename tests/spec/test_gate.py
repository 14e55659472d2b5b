"""The speculation gate: always on for small batches; for larger ones it measures seconds per
token with and without speculation, runs the faster mode, probes the other ever more rarely,
and switches when the measurements say so."""

from tandem.spec.gate import SpeculationGate


class Req:
    def __init__(self):
        self.all_token_ids = [1]


class Sim:
    """A batch of requests; a step takes `cost[mode]` seconds and gives `gain[mode]` tokens each."""

    def __init__(self, gate, n, cost, gain):
        self.gate, self.reqs, self.cost, self.gain = gate, [Req() for _ in range(n)], cost, gain
        self.now = 0.0
        gate.clock = lambda: self.now

    def run(self, steps):
        modes = []
        for _ in range(steps):
            mode = self.gate.speculate(self.reqs)
            modes.append(mode)
            self.now += self.cost[mode]
            for r in self.reqs:
                r.all_token_ids += [0] * self.gain[mode]
        return modes


def test_small_batches_always_speculate():
    gate = SpeculationGate(min_batch=8)
    sim = Sim(gate, 4, cost={True: 10.0, False: 1.0}, gain={True: 1, False: 1})
    assert sim.run(20) == [True] * 20


def test_the_faster_mode_wins_and_the_other_is_probed_ever_more_rarely():
    gate = SpeculationGate(min_batch=8, min_samples=3, probe_every=4, max_probe_every=16)
    # with speculation: 3 s for 2 tokens each (1.5 s/token); without: 1 s for 1 (1 s/token)
    sim = Sim(gate, 8, cost={True: 3.0, False: 1.0}, gain={True: 2, False: 1})
    modes = sim.run(60)
    # exploration alternates (the first step's sample is recorded at the second call)
    assert modes[:6] == [True, False, True, False, True, False]
    assert gate.modes() == {4: False}
    # decided at step 6; probes 4, then 8, then 16 (the cap) steps apart
    assert [i for i, m in enumerate(modes) if m and i >= 6] == [9, 17, 33, 49]


def test_a_change_in_traffic_flips_the_choice():
    gate = SpeculationGate(min_batch=8, min_samples=3, probe_every=4, max_probe_every=8, window=3)
    sim = Sim(gate, 16, cost={True: 3.0, False: 1.0}, gain={True: 2, False: 1})
    sim.run(30)
    assert gate.modes() == {5: False}
    sim.gain = {True: 6, False: 1}     # drafts now accepted in full: 0.5 s/token with speculation
    modes = sim.run(40)
    assert gate.modes() == {5: True}
    assert modes[-10:].count(True) >= 7   # the other mode probed again from every 4 steps
