"""Where each rank of a parallel worker computes and which torch.distributed backend it uses."""

import pytest
import torch

from tandem.parallel.config import ParallelConfig
from tandem.parallel.group import RankGroup

TP2 = ParallelConfig(tensor_parallel_size=2)


def test_cpu_ranks_use_gloo_on_the_cpu():
    assert TP2.backend("cpu", 0) == "gloo"
    assert TP2.rank_device("cpu", 1, 0) == torch.device("cpu")
    with pytest.raises(ValueError, match="needs CUDA ranks"):
        ParallelConfig(tensor_parallel_size=2, distributed_backend="nccl").backend("cpu", 0)


def test_cuda_ranks_take_the_gpus_after_the_given_one_wrapping_round():
    pcfg = ParallelConfig(tensor_parallel_size=2, pipeline_parallel_size=2)
    assert [pcfg.rank_device("cuda", r, 8).index for r in range(4)] == [0, 1, 2, 3]
    assert [pcfg.rank_device("cuda:6", r, 8).index for r in range(4)] == [6, 7, 0, 1]
    assert [pcfg.rank_device("cuda", r, 1).index for r in range(4)] == [0, 0, 0, 0]
    with pytest.raises(ValueError, match="no CUDA GPU"):
        pcfg.rank_device("cuda", 0, 0)


def test_auto_takes_nccl_with_a_gpu_per_rank_and_gloo_when_ranks_share_one():
    assert TP2.backend("cuda", 2) == "nccl"
    assert TP2.backend("cuda", 1) == "gloo"
    forced = ParallelConfig(tensor_parallel_size=2, distributed_backend="nccl")
    with pytest.raises(ValueError, match="NCCL needs a GPU per rank: 2 ranks, 1 GPU"):
        forced.backend("cuda", 1)
    assert ParallelConfig(tensor_parallel_size=2, distributed_backend="gloo").backend("cuda", 8) == "gloo"
    with pytest.raises(ValueError, match="distributed_backend 'mpi'"):
        ParallelConfig(distributed_backend="mpi")


def test_only_gloo_on_a_gpu_copies_through_host_memory():
    assert RankGroup(TP2, 0, torch.device("cuda", 0), "gloo").staged
    assert not RankGroup(TP2, 0, torch.device("cuda", 0), "nccl").staged
    assert not RankGroup(TP2, 0, torch.device("cpu"), "gloo").staged
