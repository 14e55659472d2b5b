"""The prefill/decode handoff as a KV connector (tandem/kv/connector.py) over a Transport.

Prefill role: a `prefill_only` request that sampled its first token finishes with its blocks kept;
the worker side offers them to the transport's source, and the scheduler side returns a KVHandle
(this worker's address, the block ids, the layout, the full blocks' hashes) to the client. The
blocks are released when the decode side confirms its pull, gives them up, the gateway withdraws
them (`drop`), or the source's pin timeout passes.

Decode role: a request carrying a KVHandle is admitted with blocks for the handle's tokens and
waits while the sink pulls them. Local prefix-cache hits are kept, but never the handle's last
block: at least one block is pulled, because the pull's confirmation is what tells the prefill
worker to release its copy. A failed pull is reported, and the request recomputes its prompt.
A request preempted after its pull recomputes locally (the prefill worker released its copy).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from tandem.kv.connector import (NOTHING_KEPT, ConnectorEvents, ExternalMatch, FinishedKV, KVConnector,
                                 KVConnectorScheduler, KVConnectorWorker, KVLoad, KVRequest, KVSave)
from tandem.kv.layout import KVLayout
from tandem.transfer.base import Transport
from tandem.transfer.handoff_times import HandoffTimes
from tandem.errors import InvalidRequest
from tandem.types import EngineRequest, KVHandle

log = logging.getLogger(__name__)


class HandoffScheduler(KVConnectorScheduler):
    hands_over = True

    def __init__(self, address: str, kind: str, layout: KVLayout) -> None:
        self.address = address
        self.kind = kind
        self.layout = layout

    def validate(self, req: EngineRequest) -> None:
        handle = req.kv_handle
        if handle is None:
            return
        expected = len(req.prompt_token_ids) + len(req.resume_output_ids) - 1
        if handle.num_tokens != expected:
            raise InvalidRequest(f"kv_handle covers {handle.num_tokens} tokens, expected {expected} "
                                 "(prompt plus resumed tokens but the last)", param="kv_handle")
        self.layout.check_compatible(KVLayout.from_dict(handle.layout))   # here: this worker

    def match(self, req: KVRequest, num_local_tokens: int, block_size: int) -> ExternalMatch | None:
        handle = req.kv_handle
        if handle is None or req.num_preemptions > 0:
            return None
        keep = min(num_local_tokens // block_size, (handle.num_tokens - 1) // block_size)
        return ExternalMatch(keep * block_size, handle.num_tokens - keep * block_size, load_async=True,
                             cache_hit=False)

    def load(self, req: KVRequest, match: ExternalMatch, first_block: int,
             dst_block_ids: Sequence[int]) -> KVLoad:
        # the source is the handle: the load pulls its blocks first_block.. into dst_block_ids
        return KVLoad(req.request_id, first_block, tuple(dst_block_ids), req.kv_handle)

    def request_finished(self, req: KVRequest, block_ids: Sequence[int], block_hashes: Sequence[int],
                         admitted: bool) -> FinishedKV:
        if req.prefill_only and req.finish_reason is None:   # handed over, not ended
            num_full = req.num_computed_tokens // self.layout.block_size
            hashes = tuple(block_hashes[:num_full])
            handle = KVHandle(worker=self.address, request_id=req.request_id, block_ids=tuple(block_ids),
                              num_tokens=req.num_computed_tokens, layout=self.layout.to_dict(),
                              block_hashes=hashes, transport=self.kind)
            save = KVSave(req.request_id, tuple(block_ids), hashes, req.num_computed_tokens)
            return FinishedKV(keep_blocks=True, kv_handle=handle, saves=(save,))
        if req.kv_handle is not None and not admitted:
            return FinishedKV(give_up=req.kv_handle)   # its pull never started
        return NOTHING_KEPT


class HandoffWorker(KVConnectorWorker):
    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._pulls: dict[str, Future] = {}
        self._offered: set[str] = set()
        self.times = HandoffTimes()
        # a pull's start and, set by its future's callback on the sink's thread, its end
        self._started: dict[str, float] = {}
        self._ended: dict[str, float] = {}
        # gives up remote blocks a request will not pull, off the step loop
        self._release_pool = ThreadPoolExecutor(1, thread_name_prefix="kv-release")

    def start_loads(self, loads: Sequence[KVLoad]) -> dict[str, str]:
        for load in loads:
            handle: KVHandle = load.source
            src = range(load.first_block, load.first_block + len(load.dst_block_ids))
            self._started[load.request_id] = time.monotonic()
            future = self.transport.sink.pull_async(handle, list(load.dst_block_ids), list(src))
            future.add_done_callback(lambda _, rid=load.request_id: self._pull_ended(rid))
            self._pulls[load.request_id] = future
        return {}   # pulls are asynchronous: they finish through poll

    def _pull_ended(self, request_id: str) -> None:
        self._ended[request_id] = time.monotonic()   # on the sink's thread: one atomic store

    def start_saves(self, saves: Sequence[KVSave]) -> None:
        for save in saves:
            self.transport.source.offer(save.request_id, list(save.block_ids))
            self._offered.add(save.request_id)

    def give_up(self, handle: KVHandle) -> None:
        self._release_pool.submit(self.transport.sink.release, handle)

    def drop(self, request_id: str) -> None:
        if request_id in self._offered:
            self.transport.source.withdraw(request_id)

    def poll(self) -> ConnectorEvents:
        events = ConnectorEvents()
        for request_id, future in list(self._pulls.items()):
            if request_id not in self._ended:   # set by the callback, after the future is done
                continue
            del self._pulls[request_id]
            took = self._ended.pop(request_id) - self._started.pop(request_id)
            error = future.exception()
            if error is None:
                events.loaded.append(request_id)
                self.times.observe(took)
            else:
                self.times.failed()
                events.failed[request_id] = str(error) or type(error).__name__
        if self._offered:
            for request_id in self.transport.source.poll_released():
                if request_id in self._offered:
                    self._offered.discard(request_id)
                    events.released.append(request_id)
        return events

    def busy(self) -> bool:
        return bool(self._pulls)

    def handoff_stats(self) -> tuple[float, ...]:
        return self.times.snapshot()

    def close(self) -> None:
        self._release_pool.shutdown(wait=True, cancel_futures=True)
        self.transport.close()


def handoff_connector(transport: Transport, layout: KVLayout) -> KVConnector:
    """The handoff's two sides over a started transport (its source serves this worker's blocks)."""
    return KVConnector(HandoffScheduler(transport.source.address, transport.kind, layout),
                       HandoffWorker(transport))
