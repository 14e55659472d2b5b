"""`tandem serve`'s GPU flags into ModelConfig: --attention triton, --moe-kernel, --cuda-graph-sizes,
--enforce-eager; a Triton kernel on the CPU without Triton's interpreter is a usage error."""

from __future__ import annotations

import pytest

from tandem.cli.serve import configs_from_args
from tests.cli.test_serve import parse

BASE = ["serve", "--model", "/m", "--max-num-seqs", "16"]


def test_defaults_leave_the_cpu_paths_unchanged():
    model = configs_from_args(parse([*BASE, "--device", "cpu"]))[0].model
    assert (model.attention, model.moe_kernel, model.cuda_graph_sizes, model.enforce_eager) == ("auto", "loop", (), False)


def test_gpu_flags_reach_the_model_config():
    model = configs_from_args(parse([*BASE, "--device", "cuda", "--attention", "triton", "--moe-kernel", "triton",
                                     "--cuda-graph-sizes", "auto"]))[0].model
    assert (model.attention, model.moe_kernel) == ("triton", "triton")
    assert model.cuda_graph_sizes == (1, 2, 4, 8, 16)
    eager = configs_from_args(parse([*BASE, "--device", "cuda", "--cuda-graph-sizes", "8", "1", "--enforce-eager"]))
    assert eager[0].model.cuda_graph_sizes == (1, 8) and eager[0].model.enforce_eager


@pytest.mark.parametrize("flags", [["--attention", "triton"], ["--moe-kernel", "triton"]])
def test_triton_on_the_cpu_is_a_usage_error_unless_interpreted(flags, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(SystemExit, match=f"{flags[0]} triton: the Triton kernels run on CUDA devices"):
        configs_from_args(parse([*BASE, "--device", "cpu", *flags]))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert configs_from_args(parse([*BASE, "--device", "cpu", *flags]))[0].model.device == "cpu"


def test_a_bad_graph_size_is_a_usage_error():
    with pytest.raises(SystemExit, match="--cuda-graph-sizes: .*positive batch size .*got '0'"):
        configs_from_args(parse([*BASE, "--device", "cuda", "--cuda-graph-sizes", "0"]))
    with pytest.raises(SystemExit, match="got 'x'"):
        configs_from_args(parse([*BASE, "--device", "cuda", "--cuda-graph-sizes", "8", "x"]))
