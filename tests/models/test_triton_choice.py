"""--attention triton / --moe-kernel triton at load time: the Triton kernels where they can run,
else the default kernels with one warning naming the reason (never an error)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (pip install '.[test]')")

from tandem.errors import ModelLoadError  # noqa: E402
from tandem.kernels.paged_decode import PagedDecodeKernel  # noqa: E402
from tandem.kernels.triton import runtime  # noqa: E402
from tandem.models.attention_choice import attention_workspace  # noqa: E402
from tandem.models.triton_choice import moe_kernel, triton_unusable  # noqa: E402

CPU = torch.device("cpu")


@pytest.fixture
def compiled(monkeypatch):
    """This process as one whose kernels compile for the GPU (no interpreter)."""
    monkeypatch.setattr(runtime, "INTERPRETED", False)


@pytest.fixture
def interpreted(monkeypatch):
    monkeypatch.setattr(runtime, "INTERPRETED", True)


def test_on_the_cpu_without_the_interpreter_triton_falls_back_with_one_warning(compiled, caplog):
    ws = attention_workspace("triton", torch.float32, CPU)
    assert isinstance(ws.decode_kernel, PagedDecodeKernel) and ws.mla_kernel is None   # as "auto"
    assert moe_kernel("triton", torch.float32, CPU) is None
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2
    assert "attention 'triton' unavailable, using 'auto'" in warnings[0] and "run on CUDA devices" in warnings[0]
    assert "looping over experts" in warnings[1]


def test_under_the_interpreter_the_triton_kernels_are_chosen(interpreted):
    ws = attention_workspace("triton", torch.bfloat16, CPU)
    assert ws.decode_kernel.graph_safe and ws.prefill_kernel is not None and ws.mla_kernel.graph_safe
    assert moe_kernel("triton", torch.bfloat16, CPU).graph_safe
    assert moe_kernel("loop", torch.bfloat16, CPU) is None


def test_what_no_device_runs_is_named(interpreted):
    assert "float64" in triton_unusable(torch.float64, CPU)
    assert "interpreter" in triton_unusable(torch.float32, torch.device("cuda"))


def test_unknown_choices_are_errors():
    with pytest.raises(ModelLoadError, match="one of auto, native, sdpa, triton"):
        attention_workspace("flash", torch.float32, CPU)
    with pytest.raises(ModelLoadError, match="one of loop, triton"):
        moe_kernel("grouped", torch.float32, CPU)
