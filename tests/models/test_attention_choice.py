"""ModelConfig.attention: which attention kernels a model gets, and the errors for what cannot run."""

from __future__ import annotations

import pytest
import torch

from tandem.errors import ModelLoadError
from tandem.kernels.build import KernelBuildConfig
from tandem.kernels.paged_decode import PagedDecodeKernel
from tandem.kernels.paged_prefill import PagedPrefillKernel
from tandem.models.attention_choice import decode_kernel, prefill_kernel

CPU = torch.device("cpu")
NO_COMPILER = KernelBuildConfig(compiler="/nonexistent/cc")


def test_auto_takes_the_kernel_on_the_cpu():
    assert isinstance(decode_kernel("auto", torch.bfloat16, CPU), PagedDecodeKernel)
    assert isinstance(decode_kernel("native", torch.float32, CPU), PagedDecodeKernel)


def test_sdpa_and_unsupported_dtypes_or_devices_get_none():
    assert decode_kernel("sdpa", torch.float32, CPU) is None
    assert decode_kernel("auto", torch.float16, CPU) is None
    assert decode_kernel("auto", torch.float32, torch.device("meta")) is None


def test_native_where_it_cannot_run_is_a_clear_error():
    with pytest.raises(ModelLoadError, match="float16 on cpu"):
        decode_kernel("native", torch.float16, CPU)
    with pytest.raises(ModelLoadError, match="could not be built"):
        decode_kernel("native", torch.float32, CPU, NO_COMPILER)
    with pytest.raises(ModelLoadError, match="one of auto, native, sdpa"):
        decode_kernel("fast", torch.float32, CPU)


def test_auto_falls_back_without_a_compiler(tmp_path, caplog):
    cfg = KernelBuildConfig(cache_dir=tmp_path, compiler="/nonexistent/cc")
    assert decode_kernel("auto", torch.float32, CPU, cfg) is None
    assert "using torch SDPA" in caplog.text


def test_prefill_kernel_only_for_bfloat16_on_a_cpu_with_amx_or_avx512_bf16():
    native = PagedPrefillKernel.load() is not None
    for choice in ("auto", "native"):
        got = prefill_kernel(choice, torch.bfloat16, CPU)
        assert isinstance(got, PagedPrefillKernel) if native else got is None
    assert prefill_kernel("sdpa", torch.bfloat16, CPU) is None
    assert prefill_kernel("native", torch.float32, CPU) is None
    assert prefill_kernel("auto", torch.bfloat16, torch.device("meta")) is None


def test_prefill_kernel_falls_back_without_a_compiler(tmp_path, caplog):
    cfg = KernelBuildConfig(cache_dir=tmp_path, compiler="/nonexistent/cc")
    assert prefill_kernel("native", torch.bfloat16, CPU, cfg) is None
    assert "using torch SDPA" in caplog.text
