from __future__ import annotations

import sys

import pytest

from tandem.kv.layout import KVLayout
from tandem.transfer import TransferConfig, TransferError, make_transport
from tandem.transfer.mooncake import MooncakeEngine

LAYOUT = KVLayout(model="m", dtype="float32", block_size=2, num_layers=1, num_kv_heads=1, head_dim=4)


def test_missing_wheel_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "mooncake.engine", None)   # import now fails like a missing wheel
    engine = MooncakeEngine(TransferConfig())
    with pytest.raises(TransferError, match="mooncake-transfer-engine-non-cuda.*libibverbs1"):
        engine.engine()


def test_native_failure_becomes_an_exception_naming_the_call():
    pytest.importorskip("mooncake.engine")
    kv = LAYOUT.allocate(4)
    t = make_transport("mooncake", kv, LAYOUT, TransferConfig())
    try:
        t.source.start()    # registers kv; a read from a segment nobody serves must fail loudly
        engine = t.sink._plane._engine
        with pytest.raises(TransferError, match="batch_transfer_sync_read of 1 ranges .* from segment "
                                                "127.0.0.1:1 failed with code"):
            engine.batch_read("127.0.0.1:1", [kv.data_ptr()], [kv.data_ptr()], [64])
    finally:
        t.close()
