"""The KV connector: KV blocks that come from, or go to, somewhere other than this worker's compute.

Split by role, as the engine is:
- the scheduler side (`KVConnectorScheduler`) answers, for a waiting request, how many tokens past
  its local prefix-cache hit can be loaded from outside and whether the load is asynchronous (the
  request then waits, holding its blocks, until the worker side reports the load); and, when a
  request finishes, whether its blocks must outlive it (served to another worker, written down);
- the worker side (`KVConnectorWorker`) starts loads and saves for a step, and reports loads that
  finished or failed and kept blocks that may now be freed.

Who frees what: only the scheduler frees blocks, through the KV cache manager. A connector never
allocates or frees a block; it reports, and the scheduler acts. Blocks a load writes into are
allocated before the load starts; on a failed load the scheduler frees them and the request
recomputes its prompt. Blocks kept at finish are freed when the worker side lists the request in
`ConnectorEvents.released`, never before.

Implementations: the prefill/decode handoff (`tandem/transfer/handoff.py`); `ConnectorSet`
(`tandem/kv/connector_set.py`) runs several at once.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tandem.kv.block_hash import Partition
from tandem.types import EngineRequest, FinishReason, KVHandle


class KVRequest(Protocol):
    """What a connector reads of a request (the engine's Request provides it)."""

    request_id: str
    all_token_ids: list[int]
    cache_keys: Partition | tuple        # its KV partition (tandem/kv/block_hash.py: cache_keys)
    kv_handle: KVHandle | None
    prefill_only: bool
    num_preemptions: int
    num_computed_tokens: int
    finish_reason: FinishReason | None   # None at finish: handed over to another worker, not ended


@dataclass(frozen=True)
class ExternalMatch:
    """Tokens a connector can provide for a waiting request, after its local prefix-cache hit."""

    num_local_tokens: int      # of the local hit, the tokens to keep (a connector may keep fewer)
    num_external_tokens: int   # tokens after those, to load
    load_async: bool           # the request waits for the load (True) or it completes within the step
    # the tokens were found in a cache (a store tier): they count as prefix-cache hits and in the
    # request's cached tokens; False for KV computed for this very request elsewhere (the handoff)
    cache_hit: bool = True


@dataclass(frozen=True)
class KVLoad:
    """Load a request's KV into local blocks: `dst_block_ids` are the request's blocks from index
    `first_block` on. `source` is the connector's own description of where they come from."""

    request_id: str
    first_block: int
    dst_block_ids: tuple[int, ...]
    source: object = None
    connector: int = 0   # index in a ConnectorSet; 0 for a single connector


@dataclass(frozen=True)
class KVSave:
    """Blocks of a finishing request a connector serves or writes down; they stay allocated until
    the worker side reports the request released."""

    request_id: str
    block_ids: tuple[int, ...]
    block_hashes: tuple[int, ...]   # of the full blocks among them, in order
    num_tokens: int                 # tokens whose KV the blocks hold
    connector: int = 0


@dataclass(frozen=True)
class FinishedKV:
    """What the connectors do with a finishing request's blocks."""

    keep_blocks: bool = False            # blocks outlive the request until released
    kv_handle: KVHandle | None = None    # returned to the client: where another worker pulls from
    saves: tuple[KVSave, ...] = ()       # to start on the worker side; keep_blocks needs at least one
    give_up: KVHandle | None = None      # remote blocks this request never loaded (tell their owner)


NOTHING_KEPT = FinishedKV()


@dataclass
class ConnectorEvents:
    """What the worker side reports at the start of a step; each id at most once."""

    loaded: list[str] = field(default_factory=list)          # loads complete: the blocks hold the KV
    failed: dict[str, str] = field(default_factory=dict)     # loads failed: request id -> reason
    released: list[str] = field(default_factory=list)        # kept blocks that may be freed now


class KVConnectorScheduler(abc.ABC):
    """Scheduler side: decisions only, no I/O."""

    # serves the prefill/decode handoff: requests may carry `kv_handle` or ask `prefill_only`
    hands_over: bool = False

    def validate(self, req: EngineRequest) -> None:
        """Raise a TandemError (tandem.errors) naming the field if this connector cannot serve
        what `req` asks of it; called before the request is queued."""

    @abc.abstractmethod
    def match(self, req: KVRequest, num_local_tokens: int, block_size: int) -> ExternalMatch | None:
        """Tokens past the local hit that this connector can load, or None."""

    @abc.abstractmethod
    def load(self, req: KVRequest, match: ExternalMatch, first_block: int,
             dst_block_ids: Sequence[int]) -> KVLoad:
        """The load to start for an admitted request, into its newly allocated blocks."""

    @abc.abstractmethod
    def request_finished(self, req: KVRequest, block_ids: Sequence[int], block_hashes: Sequence[int],
                         admitted: bool) -> FinishedKV:
        """`req` ends (its KV is computed up to req.num_computed_tokens): keep its blocks or not."""


class KVConnectorWorker(abc.ABC):
    """Worker side: I/O, started per step, reported through `poll`."""

    @abc.abstractmethod
    def start_loads(self, loads: Sequence[KVLoad]) -> dict[str, str]:
        """Start copying into the loads' blocks. Synchronous loads (ExternalMatch.load_async
        False) are complete when this returns, and their failures are returned (request id ->
        reason); asynchronous loads finish or fail through `poll`."""

    @abc.abstractmethod
    def start_saves(self, saves: Sequence[KVSave]) -> None:
        """Start serving or writing the saves' blocks; they come back through `poll().released`."""

    @abc.abstractmethod
    def give_up(self, handle: KVHandle) -> None:
        """Tell a remote owner its blocks will not be loaded (best effort, never blocks the step).
        Connectors that take no KVHandle ignore it."""

    @abc.abstractmethod
    def drop(self, request_id: str) -> None:
        """Kept blocks of `request_id` are no longer wanted (the client gave up): release them as
        soon as nothing reads them. Unknown ids are ignored."""

    @abc.abstractmethod
    def poll(self) -> ConnectorEvents:
        """Loads finished or failed, and kept blocks released, since the last poll."""

    @abc.abstractmethod
    def busy(self) -> bool:
        """Loads or saves in flight (the engine keeps stepping, or polling, while True)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop background work. Blocks stay the scheduler's to free."""

    def demote(self, blocks: Sequence[tuple[int, int, tuple, int]]) -> None:
        """Device blocks (block id, block hash, KV partition `cache_keys`, the block's index in
        its sequence) about to be overwritten that retention held for a session's next turn: copy
        them down a tier if it lacks them, before this returns (the step's forward overwrites them
        next). Default: nothing below."""

    def tier_stats(self) -> tuple[float, ...]:
        """Counters of storage tiers below the device (EngineStats.kv_tier_stats); () for a
        connector with none."""
        return ()

    def tier_weights(self) -> tuple[float, ...]:
        """Per tier of KV_TIERS, what loading a block costs against recomputing it, as this
        worker's cost model measures it (EngineStats.kv_tier_weights); () for a connector with no
        tiers or no cost model."""
        return ()

    def handoff_stats(self) -> tuple[float, ...]:
        """The handoff's KV pulls (EngineStats.kv_handoff_stats); () for a connector that takes
        no KVHandle."""
        return ()


@dataclass(frozen=True)
class KVConnector:
    """One connector's two sides, built together."""

    scheduler: KVConnectorScheduler
    worker: KVConnectorWorker
