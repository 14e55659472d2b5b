"""CUDA graphs' policy: capture sizes, the bucket a step replays, and why graphs cannot run."""

from __future__ import annotations

import pytest
import torch

from tandem.runner.graph_policy import bucket, capture_sizes, unusable_reason

CUDA = torch.device("cuda")


def test_capture_sizes_auto_and_given():
    assert capture_sizes(["auto"], 32) == (1, 2, 4, 8, 16, 24, 32)
    assert capture_sizes(["auto"], 3) == (1, 2)
    assert capture_sizes(["auto"], 4096)[-3:] == (496, 504, 512)
    assert capture_sizes(["16", "1", "4", "16"], 8) == (1, 4, 16)   # given sizes are kept as given
    for bad in (["1", "0"], ["-2"], ["auto", "8"]):
        with pytest.raises(ValueError, match="positive batch size"):
            capture_sizes(bad, 8)


def test_a_step_replays_the_smallest_size_that_holds_it():
    sizes = (1, 2, 4, 8, 16)
    assert [bucket(sizes, n) for n in (1, 2, 3, 5, 8, 9, 16, 17)] == [1, 2, 4, 8, 8, 16, 16, None]


def test_reasons_name_what_to_change():
    assert unusable_reason(CUDA, 1, True, True) is None
    assert "CUDA device; this worker computes on cpu" in unusable_reason(torch.device("cpu"), 1, True, True)
    assert "2 ranks" in unusable_reason(CUDA, 2, True, True)
    assert "--attention triton" in unusable_reason(CUDA, 1, False, True)
    assert "--moe-kernel triton" in unusable_reason(CUDA, 1, True, False)
