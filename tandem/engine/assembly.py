"""The one place an engine is put together from its EngineConfig (`Engine.from_config` builds
the Engine from what `assemble` returns): a worker of one process, a handoff worker and a parallel
worker's rank 0 differ only in where their KV cache lives (tandem/engine/kv_placement.py).

In order:
1. the model (unless given: a parallel worker's rank 0 loads its shard) and the tokenizer;
2. the KV budget (tandem/runner/kv_budget.py), fixed before a draft model sizes its own cache by
   it (SpecTarget.kv_tokens); then the proposer (tandem/spec/factory.py), whose weights and cache,
   on a GPU, take part of the share: the budget is measured again and can only shrink;
3. the KV cache, where the placement puts it;
4. the KV connectors: the handoff over the placement's transport first (a request carrying a KV
   handle pulls from its prefill worker), then the tiers below the device
   (tandem/kvstore/factory.py), whose newly stored blocks become the engine's KV events.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from tandem.config import EngineConfig
from tandem.engine.kv_placement import KVPlacement, placement_for
from tandem.engine.proposer import Proposer
from tandem.kv.connector import KVConnector
from tandem.kv.connector_set import connector_set
from tandem.kv.events import KVEventLog
from tandem.kvstore.factory import tiered_connector_for
from tandem.models.kv_layout import layout_of
from tandem.models.loader import LoadedModel, load_model
from tandem.runner.kv_budget import KVBudget
from tandem.spec.factory import make_proposer
from tandem.spec.registry import proposer_kind
from tandem.spec.target import SpecTarget
from tandem.tokenization.tokenizer import Tokenizer
from tandem.transfer.handoff import handoff_connector


@dataclass(frozen=True)
class EngineParts:
    """What an Engine is built from (tandem/engine/engine.py: Engine.__init__'s arguments)."""

    config: EngineConfig          # its cache.num_blocks is the allocated count
    loaded: LoadedModel
    tokenizer: Tokenizer
    kv_cache: torch.Tensor        # [num_blocks, *layout.block_shape]
    connector: KVConnector | None
    proposer: Proposer | None
    transport_address: str | None  # where this worker's blocks are served, when they are
    events: KVEventLog            # the KV cache's events; the tiers report theirs here too


def assemble(config: EngineConfig, loaded: LoadedModel | None = None,
             kv: KVPlacement | None = None) -> EngineParts:
    """`kv`: where the cache lives; default: as the config says (placement_for)."""
    if config.speculative is not None:   # a bad method fails before the model loads
        proposer_kind(config.speculative)
    if config.num_threads:
        torch.set_num_threads(config.num_threads)
    kv = kv if kv is not None else placement_for(config)
    loaded = loaded if loaded is not None else load_model(config.model)
    tokenizer = Tokenizer.from_dir(config.model.path, config.model.chat_template)
    layout = layout_of(loaded, config.cache)
    budget = KVBudget(config, loaded.model, loaded.arch.vocab_size, loaded.max_model_len)
    has_draft = config.speculative is not None and bool(config.speculative.model)
    config = _with_blocks(config, budget.num_blocks(layout, draft_to_come=has_draft))
    proposer = None
    if config.speculative is not None:
        proposer = make_proposer(config.speculative, SpecTarget(config, loaded, tokenizer))
        if has_draft:   # on a GPU its weights and cache now hold part of the share
            config = _with_blocks(config, min(config.cache.num_blocks, budget.num_blocks(layout)))
    placed = kv.allocate(config, loaded, layout, config.cache.num_blocks)
    connectors: list[KVConnector] = []
    address = None
    if placed.transport is not None:
        placed.transport.source.start()
        connectors.append(handoff_connector(placed.transport, placed.handoff_layout))
        address = placed.transport.source.address
    events = KVEventLog()
    if config.kv_store.enabled:   # host memory, disk, Mooncake Store below the device
        tiers = tiered_connector_for(config, loaded.model, loaded.arch.vocab_size, layout, placed.cache)
        tiers.worker.attach_events(events)
        connectors.append(tiers)
    connector = connector_set(connectors) if connectors else None
    return EngineParts(config, loaded, tokenizer, placed.cache, connector, proposer, address, events)


def _with_blocks(config: EngineConfig, num_blocks: int) -> EngineConfig:
    return dataclasses.replace(config, cache=dataclasses.replace(config.cache, num_blocks=num_blocks))
