"""Shared fixtures: small HF-format models written once per session, and engines whose
blocks are checked to be free again when the test ends.

TANDEM_TEST_DEVICE (default cpu) is where engine_config's engines compute: `TANDEM_TEST_DEVICE=cuda`
runs the engine, parallel and spec tests on a GPU (references such as transformers stay on the CPU).
"""

from __future__ import annotations

import os
import tempfile

import pytest
import torch

from tandem.config import CacheConfig, EngineConfig, GrammarConfig, ModelConfig, SchedulerConfig
from tandem.testing.tiny_model import write_test_model

torch.set_num_threads(1)

TEST_DEVICE = os.environ.get("TANDEM_TEST_DEVICE", "cpu")

# On the CPU, tandem's Triton kernels (tandem.kernels.triton, tests/kernels/triton) run in Triton's
# interpreter. triton.jit reads this when a kernel's module is imported, whichever test imports it
# first; it changes nothing else (no other code path runs Triton kernels on CPU tensors).
if TEST_DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"

# servers keep their queue database under $XDG_STATE_HOME/tandem: the tests' own directory, not the
# user's home (set before any server, in-process or child, is started; children inherit it)
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="tandem-test-state-")


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory):
    return write_test_model(tmp_path_factory.mktemp("llama"), "LlamaForCausalLM", seed=1)


@pytest.fixture(scope="session")
def qwen3_dir(tmp_path_factory):
    return write_test_model(tmp_path_factory.mktemp("qwen3"), "Qwen3ForCausalLM", seed=2)


@pytest.fixture(params=["llama_dir", "qwen3_dir"])
def llama_or_qwen3_dir(request):
    """Each of the two architectures checked against transformers in turn."""
    return request.getfixturevalue(request.param)


# Engines of the tests compile grammars in the test's process: the compile helper process costs
# seconds to start, per engine. tests/grammar/test_compile_process.py and
# tests/engine/test_async_engine_grammar.py run it, as `tandem serve` does by default (tests/e2e).
IN_PROCESS_GRAMMARS = GrammarConfig(compile_timeout_s=None)
# every server a test starts compiles grammars in its own process too (no helper process, whose
# start costs ~4 s of CPU per worker); the helper's own tests pass --grammar-compile-timeout
os.environ.setdefault("TANDEM_GRAMMAR_COMPILE_TIMEOUT", "0")


def engine_config(model_dir, *, num_blocks=256, block_size=4, max_num_batched_tokens=64,
                  max_num_seqs=32, prefix_caching=True, role="both", dtype="float32",
                  kv_cache_dtype="auto", device=TEST_DEVICE,
                  grammar: GrammarConfig = IN_PROCESS_GRAMMARS) -> EngineConfig:
    return EngineConfig(
        model=ModelConfig(path=str(model_dir), dtype=dtype, show_progress=False, device=device),
        cache=CacheConfig(block_size=block_size, num_blocks=num_blocks,
                          enable_prefix_caching=prefix_caching, kv_cache_dtype=kv_cache_dtype),
        scheduler=SchedulerConfig(max_num_batched_tokens=max_num_batched_tokens,
                                  max_num_seqs=max_num_seqs),
        role=role, grammar=grammar)


def assert_all_blocks_free(engine) -> None:
    """Idle invariant: no request holds a block; every block is free (cached ones evictable)."""
    assert not engine.requests, f"requests still in the engine: {list(engine.requests)}"
    assert engine.kv.num_held() == 0, "a finished request still holds blocks"
    assert engine.kv.pool.num_free == engine.num_blocks
    assert all(b.ref_count == 0 for b in engine.kv.pool.blocks)


def shm_safe_device(kind: str | None) -> str:
    """TEST_DEVICE, except the CPU for the shm transport (it keeps the KV cache in host memory)."""
    return "cpu" if kind == "shm" else TEST_DEVICE


@pytest.fixture
def make_engine():
    """Build engines with `make_engine(model_dir, **engine_config kwargs)`; checks every block is
    free again after the test."""
    from tandem.engine.engine import Engine

    engines = []

    def make(model_dir, **kwargs):
        engine = Engine.from_config(engine_config(model_dir, **kwargs))
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        assert_all_blocks_free(engine)
        engine.shutdown()
