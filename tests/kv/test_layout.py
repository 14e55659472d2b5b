"""KVLayout.allocate: the KV tensor every worker starts from."""

import torch

from tandem.kv.layout import KVLayout


def test_allocate_is_zero_filled_writable_and_exact():
    layout = KVLayout(model="m", dtype="bfloat16", block_size=4, num_layers=2, num_kv_heads=2, head_dim=8)
    kv = layout.allocate(1000)
    assert kv.shape == (1000, 2, 2, 4, 2, 8) and kv.dtype == torch.bfloat16 and kv.is_contiguous()
    assert kv.untyped_storage().nbytes() == 1000 * layout.block_nbytes
    assert not kv.any()
    kv[999, 1, 1, 3] = 2.5
    assert kv.sum().item() == 2.5 * 2 * 8
    f32 = KVLayout(model="m", dtype="float32", block_size=4, num_layers=1, num_kv_heads=1, head_dim=4)
    assert not f32.allocate(3).any() and f32.allocate(0).shape[0] == 0
