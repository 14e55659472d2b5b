"""`tandem serve`'s GPU flags into ModelConfig: --attention triton, --moe-kernel; a Triton kernel on
the CPU without Triton's interpreter is a usage error."""

from __future__ import annotations

import pytest

from tandem.cli.serve import configs_from_args
from tests.server.test_cli import parse

BASE = ["serve", "--model", "/m", "--max-num-seqs", "16"]


def test_defaults_leave_the_cpu_paths_unchanged():
    model = configs_from_args(parse([*BASE, "--device", "cpu"]))[0].model
    assert (model.attention, model.moe_kernel) == ("auto", "loop")


def test_gpu_flags_reach_the_model_config():
    model = configs_from_args(parse([*BASE, "--device", "cuda", "--attention", "triton",
                                     "--moe-kernel", "triton"]))[0].model
    assert (model.attention, model.moe_kernel) == ("triton", "triton")


@pytest.mark.parametrize("flags", [["--attention", "triton"], ["--moe-kernel", "triton"]])
def test_triton_on_the_cpu_is_a_usage_error_unless_interpreted(flags, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(SystemExit, match=f"{flags[0]} triton: the Triton kernels run on CUDA devices"):
        configs_from_args(parse([*BASE, "--device", "cpu", *flags]))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert configs_from_args(parse([*BASE, "--device", "cpu", *flags]))[0].model.device == "cpu"
