"""Packed CPU bfloat16 linears: bitwise equal to F.linear, the checkpoint weight released."""

import os
import sys
import threading

import pytest
import torch
import torch.nn.functional as F

from tandem.layers.linear import Linear, PackingThread, can_pack, pack_linears

pytestmark = pytest.mark.skipif(not can_pack(torch.bfloat16, torch.device("cpu")),
                                reason="no oneDNN bfloat16 packing here (torch without mkldnn, or a CPU "
                                       "without AVX-512 / AVX-NE-CONVERT)")


def _linear(n_in: int, n_out: int, bias: bool, seed: int) -> Linear:
    g = torch.Generator().manual_seed(seed)
    m = Linear(n_in, n_out, bias=bias)
    m.weight = torch.nn.Parameter(torch.randn(n_out, n_in, generator=g).to(torch.bfloat16), requires_grad=False)
    if bias:
        m.bias = torch.nn.Parameter(torch.randn(n_out, generator=g).to(torch.bfloat16), requires_grad=False)
    return m


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rows", [0, 1, 3, 64, 257])
def test_packed_equals_unpacked_bitwise(rows, bias):
    m = _linear(96, 160, bias, seed=rows)
    x = torch.randn(rows, 96, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    with torch.inference_mode():
        ref = F.linear(x, m.weight, m.bias)
        m.pack()
        assert torch.equal(m(x), ref)


def test_pack_linears_drops_the_weights_and_keeps_biases():
    model = torch.nn.Sequential(_linear(32, 48, True, 0), torch.nn.ReLU(), _linear(48, 16, False, 1))
    assert pack_linears(model) == 2
    assert [n for n, _ in model.named_parameters()] == ["0.bias"]
    assert pack_linears(model) == 0  # already packed


def test_only_cpu_bfloat16_is_packed():
    assert can_pack(torch.bfloat16, torch.device("cpu"))
    assert not can_pack(torch.float32, torch.device("cpu"))
    assert not can_pack(torch.float16, torch.device("cpu"))
    assert not can_pack(torch.bfloat16, torch.device("cuda"))


def test_packing_thread_while_the_model_serves():
    """Forwards running while another thread packs every layer give the unpacked outputs."""
    model = torch.nn.Sequential(*[_linear(64, 64, i % 2 == 0, i) for i in range(24)])
    x = torch.randn(5, 64, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    with torch.inference_mode():
        ref = model(x)
        packing = PackingThread(model)
        packing.start()
        outs = [model(x) for _ in range(200) if packing.is_alive()]
        packing.join(timeout=30)
        outs.append(model(x))
    assert not packing.is_alive() and packing.error is None
    assert all(m.packed_weight is not None and m.weight is None for m in model)
    assert all(torch.equal(o, ref) for o in outs)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread priorities are Linux's")
def test_the_packing_thread_runs_at_a_low_priority(monkeypatch):
    seen = []
    monkeypatch.setattr("tandem.layers.linear.pack_linears",
                        lambda model: seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    packing = PackingThread(torch.nn.Sequential())
    packing.start()
    packing.join(timeout=30)
    assert seen == [10] and packing.error is None
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before   # only that thread
