"""A KV connector for tests: finished requests' full blocks are copied into a dict keyed by their
chained hash, and loaded back into a later request's blocks (synchronously or not). A small,
real stand-in for a storage tier, with failures on demand."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tandem.kv.block_hash import hash_request_blocks
from tandem.kv.connector import (ConnectorEvents, ExternalMatch, FinishedKV, KVConnector, KVConnectorScheduler,
                                 KVConnectorWorker, KVLoad, KVSave)


class HostCopyScheduler(KVConnectorScheduler):
    def __init__(self, store: dict[int, torch.Tensor], block_size: int, hash_seed: int, load_async: bool):
        self.store = store
        self.block_size = block_size
        self.hash_seed = hash_seed
        self.load_async = load_async

    def match(self, req, num_local_tokens, block_size):
        hashes = hash_request_blocks(req.all_token_ids, block_size, req.cache_keys, self.hash_seed)
        first = num_local_tokens // block_size
        last = (len(req.all_token_ids) - 1) // block_size   # leave a token to compute
        n = 0
        while first + n < last and hashes[first + n] in self.store:
            n += 1
        return ExternalMatch(first * block_size, n * block_size, self.load_async) if n else None

    def load(self, req, match, first_block, dst_block_ids):
        hashes = hash_request_blocks(req.all_token_ids, self.block_size, req.cache_keys, self.hash_seed)
        return KVLoad(req.request_id, first_block, tuple(dst_block_ids),
                      tuple(hashes[first_block:first_block + len(dst_block_ids)]))

    def request_finished(self, req, block_ids, block_hashes, admitted):
        num_full = min(req.num_computed_tokens // self.block_size, len(block_hashes))
        if req.finish_reason is None or num_full == 0:
            return FinishedKV()
        save = KVSave(req.request_id, tuple(block_ids[:num_full]), tuple(block_hashes[:num_full]),
                      num_full * self.block_size)
        return FinishedKV(keep_blocks=True, saves=(save,))


class HostCopyWorker(KVConnectorWorker):
    def __init__(self, store: dict[int, torch.Tensor], kv: torch.Tensor, load_async: bool):
        self.store = store
        self.kv = kv
        self.load_async = load_async
        self.fail_loads = 0          # the next n loads fail
        self.loads: list[KVLoad] = []
        self._loaded: list[str] = []
        self._failed: dict[str, str] = {}
        self._released: list[str] = []

    def start_loads(self, loads: Sequence[KVLoad]) -> dict[str, str]:
        failed = {}
        for load in loads:
            self.loads.append(load)
            if self.fail_loads:
                self.fail_loads -= 1
                failed[load.request_id] = "injected failure"
                continue
            for block_id, block_hash in zip(load.dst_block_ids, load.source):
                self.kv[block_id].copy_(self.store[block_hash])
            self._loaded.append(load.request_id)
        if not self.load_async:   # complete now: nothing to report at the next poll
            self._loaded.clear()
            return failed
        self._failed.update(failed)
        return {}

    def start_saves(self, saves: Sequence[KVSave]) -> None:
        for save in saves:
            for block_id, block_hash in zip(save.block_ids, save.block_hashes):
                self.store.setdefault(block_hash, self.kv[block_id].clone())
            self._released.append(save.request_id)   # copied: released at the next poll

    def give_up(self, handle) -> None:
        pass

    def drop(self, request_id: str) -> None:
        pass

    def poll(self) -> ConnectorEvents:
        events = ConnectorEvents(self._loaded, self._failed, self._released)
        self._loaded, self._failed, self._released = [], {}, []
        return events

    def busy(self) -> bool:
        return bool(self._loaded or self._failed or self._released)

    def close(self) -> None:
        pass


def host_copy_connector(kv: torch.Tensor, block_size: int, hash_seed: int = 0,
                        load_async: bool = False) -> KVConnector:
    store: dict[int, torch.Tensor] = {}
    return KVConnector(HostCopyScheduler(store, block_size, hash_seed, load_async),
                       HostCopyWorker(store, kv, load_async))
