"""Where an engine's KV cache lives: the one part of its assembly (tandem/engine/assembly.py)
that differs between workers.

- `DeviceKV`: memory on the model's device that no other worker reads;
- `TransportKV(kind)`: memory a KV transport serves and fills for the prefill/decode handoff (a
  shared-memory file for "shm", so that decode workers of the host can map it);
- a parallel worker's rank 0: its own cache, and every rank's share of each block mapped for the
  handoff (tandem/parallel/kv_handoff.py: `ParallelKV`).
A placement allocates; the assembly starts the transport and builds the handoff connector over it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from tandem.config import EngineConfig
from tandem.kv.layout import KVLayout
from tandem.models.loader import LoadedModel
from tandem.transfer.base import Transport
from tandem.transfer.factory import allocate_kv, make_transport


@dataclass(frozen=True)
class EngineKV:
    cache: torch.Tensor                     # [num_blocks, *layout.block_shape]: what this process computes with
    transport: Transport | None = None      # serves and fills the blocks for the handoff; not started
    handoff_layout: KVLayout | None = None  # what the transport's handles describe (with a transport)


class KVPlacement(Protocol):
    def allocate(self, config: EngineConfig, loaded: LoadedModel, layout: KVLayout,
                 num_blocks: int) -> EngineKV:
        """`num_blocks` blocks of `layout` (this process's shapes) for the engine's cache."""
        ...


@dataclass(frozen=True)
class DeviceKV:
    def allocate(self, config: EngineConfig, loaded: LoadedModel, layout: KVLayout,
                 num_blocks: int) -> EngineKV:
        return EngineKV(layout.allocate(num_blocks, config.model.device))


@dataclass(frozen=True)
class TransportKV:
    kind: str   # "tcp", "shm" or "mooncake" (tandem/transfer/factory.py)

    def allocate(self, config: EngineConfig, loaded: LoadedModel, layout: KVLayout,
                 num_blocks: int) -> EngineKV:
        cache = allocate_kv(layout, num_blocks, self.kind, config.model.device, config.transfer)
        return EngineKV(cache, make_transport(self.kind, cache, layout, config.transfer), layout)


def placement_for(config: EngineConfig) -> KVPlacement:
    """A worker of one process: a transport's memory when it hands KV over (its role or
    --kv-transport), the device's otherwise."""
    kind = config.resolved_transport
    return DeviceKV() if kind is None else TransportKV(kind)
