"""How many KV blocks a worker allocates: explicit counts and bytes first, the CPU's fixed budget,
and on a GPU the share of its memory left after the weights and a step's activations."""

import dataclasses

import pytest

from tandem.config import CPU_KV_CACHE_BYTES, CacheConfig
from tandem.runner.kv_budget import KVBudget, blocks_in_share
from tests.conftest import engine_config

GIB = 2**30


def test_a_share_of_the_gpu_less_what_is_held_and_the_activations():
    # 0.9 x 80 GiB = 72 GiB; 16 GiB of weights, 2 GiB of activations: 54 GiB of 1 MiB blocks
    assert blocks_in_share(80 * GIB, 79 * GIB, 16 * GIB, 2 * GIB, 0.9, 2**20) == 54 * 1024


def test_never_more_than_the_device_has_free():
    # another process holds 40 GiB: 39 GiB free, 2 GiB of activations -> 37 GiB, not 54
    assert blocks_in_share(80 * GIB, 39 * GIB, 16 * GIB, 2 * GIB, 0.9, 2**20) == 37 * 1024


def test_no_room_is_a_clear_error_with_the_figures():
    with pytest.raises(ValueError, match=r"no room for the KV cache: --gpu-memory-utilization 0.5 of 80.0 GiB "
                                         r"is 40.00 GiB .*take 39.00 GiB and a step's activations 2.00 GiB"):
        blocks_in_share(80 * GIB, 79 * GIB, 39 * GIB, 2 * GIB, 0.5, 2**20)


def test_counts_and_bytes_given_win_and_the_cpu_has_a_fixed_budget(llama_dir):
    from tandem.models.kv_layout import layout_of
    from tandem.models.loader import load_model

    cfg = engine_config(llama_dir, num_blocks=None, device="cpu")
    loaded = load_model(cfg.model)
    layout = layout_of(loaded, cfg.cache)

    def blocks(**cache):
        c = dataclasses.replace(cfg, cache=dataclasses.replace(cfg.cache, **cache))
        return KVBudget(c, loaded.model, loaded.arch.vocab_size, loaded.max_model_len).num_blocks(layout)

    assert blocks() == CPU_KV_CACHE_BYTES // layout.block_nbytes
    assert blocks(kv_cache_bytes=64 * layout.block_nbytes) == 64
    assert blocks(kv_cache_bytes=64 * layout.block_nbytes, num_blocks=7) == 7


def test_the_utilization_is_a_share():
    with pytest.raises(ValueError, match="gpu_memory_utilization must be in"):
        CacheConfig(gpu_memory_utilization=1.5)
