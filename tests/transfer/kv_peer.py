"""A worker process for transfer tests: holds KV tensors and transports, driven by commands over a Pipe.

Commands (tuples) and replies:
  ("open", name, kind, layout_dict, num_blocks, config_kwargs) -> source address
  ("offer", name, request_id, block_ids, seed)  fills the blocks with pattern(seed) and offers them -> None
  ("pull", name, handle_dict, dst_ids, src_indices) -> None, or ("error", type name, message)
  ("poll", name) -> released request ids        ("state", name) -> (num_pinned, num_active_reads, counts)
  ("bytes", name, block_ids) -> raw bytes of those blocks, in order
  ("exit",)
"""

from __future__ import annotations

import torch

from tandem.kv.layout import KVLayout
from tandem.transfer import TransferConfig, allocate_kv, make_transport
from tandem.types import KVHandle


def pattern(layout: KVLayout, seed: int, n: int) -> torch.Tensor:
    """[n, *block_shape] deterministic values in the layout's dtype."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn((n, *layout.block_shape), generator=g).to(layout.torch_dtype)


def as_bytes(t: torch.Tensor) -> bytes:
    return t.contiguous().view(-1).view(torch.uint8).numpy().tobytes()


def peer_main(conn) -> None:
    torch.set_num_threads(1)
    kvs, transports = {}, {}
    try:
        while True:
            cmd = conn.recv()
            op, args = cmd[0], cmd[1:]
            if op == "exit":
                return
            try:
                if op == "open":
                    name, kind, layout_d, num_blocks, cfg = args
                    layout = KVLayout.from_dict(layout_d)
                    kvs[name] = (allocate_kv(layout, num_blocks, kind), layout)
                    transports[name] = make_transport(kind, kvs[name][0], layout, TransferConfig(**cfg))
                    transports[name].source.start()
                    reply = transports[name].source.address
                elif op == "offer":
                    name, rid, block_ids, seed = args
                    kv, layout = kvs[name]
                    kv[block_ids] = pattern(layout, seed, len(block_ids))
                    transports[name].source.offer(rid, block_ids)
                    reply = None
                elif op == "pull":
                    name, handle_d, dst, src_indices = args
                    transports[name].sink.pull(KVHandle.from_dict(handle_d), dst, src_indices)
                    reply = None
                elif op == "poll":
                    reply = transports[args[0]].source.poll_released()
                elif op == "state":
                    src = transports[args[0]].source
                    reply = (src.num_pinned(), src.num_active_reads(), src.release_counts())
                elif op == "bytes":
                    name, ids = args
                    reply = as_bytes(kvs[name][0][ids])
                else:
                    raise ValueError(f"unknown command {op!r}")
            except Exception as exc:  # noqa: BLE001 - reported to the test, which asserts on it
                reply = ("error", type(exc).__name__, str(exc))
            conn.send(reply)
    finally:
        for t in transports.values():
            t.close()
