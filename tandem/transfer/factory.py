"""Build a worker's transport and its KV tensor for a chosen kind ("tcp", "shm", "mooncake")."""

from __future__ import annotations

import torch

from tandem.kv.layout import KVLayout
from tandem.transfer.base import KINDS, Transport, TransferConfig
from tandem.transfer.blocks import check_kv
from tandem.transfer.control import ControlSink, ControlSource, SinkPlane, SourcePlane
from tandem.transfer.shm import ShmSinkPlane, ShmSourcePlane, allocate_shm_kv, find_shm_file
from tandem.transfer.tcp import TcpSinkPlane, TcpSourcePlane


def allocate_kv(layout: KVLayout, num_blocks: int, kind: str = "tcp",
                device: str | torch.device = "cpu", config: TransferConfig | None = None) -> torch.Tensor:
    """The KV tensor [num_blocks, *layout.block_shape] for a transport kind: in a shared-memory file for
    "shm" (so decode workers on this host can map it), ordinary memory otherwise."""
    if kind == "shm":
        if torch.device(device).type != "cpu":
            raise ValueError("the shm transport keeps the KV cache in host memory; use tcp or mooncake on GPU")
        return allocate_shm_kv(layout, num_blocks, (config or TransferConfig()).shm_dir)
    return layout.allocate(num_blocks, device)


def make_transport(kind: str, kv: torch.Tensor, layout: KVLayout, config: TransferConfig) -> Transport:
    """Source and sink over this worker's KV tensor. The source always serves "tcp" too, and "shm" when
    the tensor lives in shared memory, so a sink of another kind can still pull from it."""
    if kind not in KINDS:
        raise ValueError(f"unknown KV transport {kind!r}; choose one of {', '.join(KINDS)}")
    check_kv(kv, layout)
    planes: dict[str, SourcePlane] = {"tcp": TcpSourcePlane(kv, layout)}
    shm = find_shm_file(kv, config.shm_dir)
    if shm is not None:
        planes["shm"] = ShmSourcePlane(shm[0], shm[1], layout)
    elif kind == "shm":
        raise ValueError("the shm transport needs the KV tensor from allocate_kv(layout, n, kind='shm')")
    sink_plane: SinkPlane
    if kind == "mooncake":
        from tandem.transfer.mooncake import MooncakeEngine, MooncakeSinkPlane, MooncakeSourcePlane
        engine = MooncakeEngine(config)
        planes["mooncake"] = MooncakeSourcePlane(kv, layout, engine)
        sink_plane = MooncakeSinkPlane(kv, layout, engine)
    elif kind == "shm":
        sink_plane = ShmSinkPlane(kv, layout, config.shm_dir)
    else:
        sink_plane = TcpSinkPlane(kv, layout)
    return Transport(kind, ControlSource(kind, kv, layout, config, planes),
                     ControlSink(kind, kv, layout, config, sink_plane))
