import numpy as np
import pytest

from tandem.sim.calibrate import fit


def test_fit_recovers_the_constants_of_synthetic_steps():
    from tandem.sim.cost_model import CostModel
    from tandem.sim.hardware import CPU
    from tandem.sim.model_spec import LLAMA512

    truth = CPU.scaled(flops=40e9, mem_bw=5e9, step_overhead_s=0.004, seq_overhead_s=0.0007)
    cost = CostModel(LLAMA512, truth)
    shapes = [[(n, c)] for n in (64, 256, 512) for c in (0, 512, 1536)] + \
             [[(1, c)] * b for b in (1, 4, 16) for c in (64, 1000)]
    points = [{"seqs": [list(s) for s in seqs], "sampled": len(seqs), "seconds": cost.step_time(seqs, len(seqs))}
              for seqs in shapes]
    constants, quality = fit("llama512", points)
    assert constants["flops"] == pytest.approx(40e9, rel=1e-6)
    assert constants["mem_bw"] == pytest.approx(5e9, rel=1e-6)
    assert constants["step_overhead_s"] == pytest.approx(0.004, rel=1e-6)
    assert constants["seq_overhead_s"] == pytest.approx(0.0007, rel=1e-6)
    assert quality["median_rel_error"] < 1e-6
    assert np.isfinite(list(constants.values())).all()
