"""Build a worker's transport and its KV tensor for a chosen kind ("tcp", "shm", "mooncake")."""

from __future__ import annotations

import torch

from tandem.kv.layout import KVLayout
from tandem.transfer.base import KINDS, TransferConfig, Transport
from tandem.transfer.control import ControlSink, ControlSource, SinkPlane, SourcePlane
from tandem.transfer.mooncake import MooncakeEngine, MooncakeSinkPlane, MooncakeSourcePlane
from tandem.transfer.shards import ShardedKV
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
    """Source and sink over this worker's KV tensor (a worker without ranks)."""
    return make_sharded_transport(kind, ShardedKV.single(kv, layout), config)


def make_sharded_transport(kind: str, kv: ShardedKV, config: TransferConfig) -> Transport:
    """Source and sink over this worker's KV, whole or split over its ranks (tandem/transfer/shards.py).
    The source always serves "tcp" too, and "shm" when every part lives in shared memory, so a sink
    of another kind can still pull from it. Mooncake moves whole blocks of one registered tensor,
    so it serves a worker without ranks only."""
    if kind not in KINDS:
        raise ValueError(f"unknown KV transport {kind!r}; choose one of {', '.join(KINDS)}")
    planes: dict[str, SourcePlane] = {"tcp": TcpSourcePlane(kv)}
    files = [(shard, find_shm_file(t, config.shm_dir)) for shard, t in kv.sources]
    if all(f is not None for _, f in files):
        planes["shm"] = ShmSourcePlane([(shard, f[0], f[1]) for shard, f in files], kv.layout)
    elif kind == "shm":
        raise ValueError("the shm transport needs the KV tensor from allocate_kv(layout, n, kind='shm')")
    sink_plane: SinkPlane
    if kind == "mooncake":
        if kv.tensor is None:
            raise ValueError("the mooncake transport moves whole blocks of one tensor: a worker split over "
                             "ranks hands KV over with --kv-transport tcp or shm")
        engine = MooncakeEngine(config)
        planes["mooncake"] = MooncakeSourcePlane(kv.tensor, kv.layout, engine)
        sink_plane = MooncakeSinkPlane(kv.tensor, kv.layout, engine)
    elif kind == "shm":
        sink_plane = ShmSinkPlane(kv, config.shm_dir)
    else:
        sink_plane = TcpSinkPlane(kv)
    return Transport(kind, ControlSource(kind, kv, config, planes), ControlSink(kind, kv, config, sink_plane))
