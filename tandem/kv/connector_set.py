"""Several KV connectors at once, seen by the engine as one (tandem/kv/connector.py).

A decode worker pulls a prompt's KV from a prefill worker (the handoff) and writes what it
generates to the shared store (the tiers): two connectors, one engine. Rules:
- loads: the connectors are asked in order; the first that offers tokens past the local hit
  loads them (a request loads from one source per admission). `KVLoad.connector` records which.
- finishes: every connector sees every finishing request. Its blocks are kept while any connector
  keeps them, and freed once each connector that kept them has released them.
- events: each connector's loads and releases are reported under the set's own bookkeeping.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from tandem.kv.connector import (ConnectorEvents, ExternalMatch, FinishedKV, KVConnector, KVConnectorScheduler,
                                 KVConnectorWorker, KVLoad, KVRequest, KVSave)
from tandem.types import EngineRequest, KVHandle


class ConnectorSetScheduler(KVConnectorScheduler):
    def __init__(self, parts: Sequence[KVConnectorScheduler]) -> None:
        self.parts = list(parts)
        self.hands_over = any(p.hands_over for p in self.parts)
        self._matched: dict[str, int] = {}     # request id -> index of the connector that matched

    def validate(self, req: EngineRequest) -> None:
        for part in self.parts:
            part.validate(req)

    def match(self, req: KVRequest, num_local_tokens: int, block_size: int) -> ExternalMatch | None:
        self._matched.pop(req.request_id, None)
        for i, part in enumerate(self.parts):
            m = part.match(req, num_local_tokens, block_size)
            if m is not None and m.num_external_tokens > 0:
                self._matched[req.request_id] = i
                return m
        return None

    def load(self, req: KVRequest, match: ExternalMatch, first_block: int,
             dst_block_ids: Sequence[int]) -> KVLoad:
        i = self._matched.pop(req.request_id)
        return replace(self.parts[i].load(req, match, first_block, dst_block_ids), connector=i)

    def request_finished(self, req: KVRequest, block_ids: Sequence[int], block_hashes: Sequence[int],
                         admitted: bool) -> FinishedKV:
        self._matched.pop(req.request_id, None)
        keep, handle, saves, give_up = False, None, [], None
        for i, part in enumerate(self.parts):
            done = part.request_finished(req, block_ids, block_hashes, admitted)
            # a connector keeps blocks through its saves: their release is what frees them
            assert not done.keep_blocks or done.saves, "a connector that keeps blocks must save them"
            keep = keep or done.keep_blocks
            handle = handle or done.kv_handle
            give_up = give_up or done.give_up
            saves.extend(replace(s, connector=i) for s in done.saves)
        return FinishedKV(keep, handle, tuple(saves), give_up)


class ConnectorSetWorker(KVConnectorWorker):
    def __init__(self, parts: Sequence[KVConnectorWorker]) -> None:
        self.parts = list(parts)
        self._keepers: dict[str, set[int]] = {}   # request id -> connectors still holding its blocks

    def start_loads(self, loads: Sequence[KVLoad]) -> dict[str, str]:
        failed: dict[str, str] = {}
        for i, part in enumerate(self.parts):
            mine = [x for x in loads if x.connector == i]
            if mine:
                failed.update(part.start_loads([replace(x, connector=0) for x in mine]))
        return failed

    def start_saves(self, saves: Sequence[KVSave]) -> None:
        for s in saves:
            self._keepers.setdefault(s.request_id, set()).add(s.connector)
        for i, part in enumerate(self.parts):
            mine = [x for x in saves if x.connector == i]
            if mine:
                part.start_saves([replace(x, connector=0) for x in mine])

    def give_up(self, handle: KVHandle) -> None:
        for part in self.parts:
            part.give_up(handle)

    def drop(self, request_id: str) -> None:
        for part in self.parts:
            part.drop(request_id)

    def poll(self) -> ConnectorEvents:
        out = ConnectorEvents()
        for i, part in enumerate(self.parts):
            events = part.poll()
            out.loaded += events.loaded
            out.failed.update(events.failed)
            for request_id in events.released:
                keepers = self._keepers.get(request_id)
                if keepers is None:
                    continue
                keepers.discard(i)
                if not keepers:
                    del self._keepers[request_id]
                    out.released.append(request_id)
        return out

    def demote(self, blocks: Sequence[tuple[int, int, tuple, int]]) -> None:
        for part in self.parts:
            part.demote(blocks)

    def busy(self) -> bool:
        return any(p.busy() for p in self.parts)

    def close(self) -> None:
        for part in self.parts:
            part.close()

    def tier_stats(self) -> tuple[float, ...]:
        return next((stats for part in self.parts if (stats := part.tier_stats())), ())

    def tier_weights(self) -> tuple[float, ...]:
        return next((w for part in self.parts if (w := part.tier_weights())), ())

    def handoff_stats(self) -> tuple[float, ...]:
        return next((stats for part in self.parts if (stats := part.handoff_stats())), ())


def connector_set(connectors: Sequence[KVConnector]) -> KVConnector:
    """One connector for the engine: the only one itself, or a set of several."""
    if len(connectors) == 1:
        return connectors[0]
    return KVConnector(ConnectorSetScheduler([c.scheduler for c in connectors]),
                       ConnectorSetWorker([c.worker for c in connectors]))
