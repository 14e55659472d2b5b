"""The tiers as a KV connector (tandem/kv/connector.py): write-through at finish, load at admission.

Scheduler side (engine thread, decisions; lookups in the tiers' indexes and one batched existence
query to the store):
- `match`: past the device hit, the longest run of blocks some tier holds, cut to the prefix whose
  load is cheaper than recomputing it (cost.py), leaving the prompt's last token to compute. A
  load served by host memory alone is synchronous (copied before the step's forward); one that
  touches disk or the store is asynchronous (the request waits while others run). Requests that
  carry a KV handle (the prefill/decode handoff pulls them) or score their prompt are left alone.
- `request_finished`: the full blocks whose KV is computed, unless every tier already holds them,
  are kept and saved. That covers a decode worker's generated tokens too, so the next turn of a
  disaggregated conversation, prefilled anywhere, finds the whole conversation.

Worker side (three threads, so that no tier I/O runs on the engine thread except host copies):
- loader: reads an asynchronous load's blocks tier by tier, in bounded batches, straight into the
  request's blocks; blocks read from below host memory are copied up into it;
- saver: copies a finished request's kept blocks to host memory (one gather), after which the
  blocks are released to the scheduler, and hands the copy to the writer;
- writer: writes the copy to disk and the store, skipping what they hold, and reports the store's
  new blocks as KV events (`store_stored`) for the gateway's prefix index (and `poll` reports, as
  `store_removed`, the first block of a lookup that the store no longer holds). Copies waiting for it
  are bounded in bytes; past the bound a save skips the lower tiers.
Only the scheduler frees blocks: a save's blocks stay allocated until the saver has copied them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from tandem.compute_threads import compute_alone
from tandem.config import KVStoreConfig
from tandem.kv.block_hash import hash_request_blocks
from tandem.kv.connector import (NOTHING_KEPT, ConnectorEvents, ExternalMatch, FinishedKV, KVConnector,
                                 KVConnectorScheduler, KVConnectorWorker, KVLoad, KVRequest, KVSave)
from tandem.kv.events import KVEventLog
from tandem.kvstore.cost import CostModel
from tandem.kvstore.keys import KeySpace, block_hash_of
from tandem.kvstore.stack import LoadPlan, TierStack
from tandem.kvstore.stats import kv_tier_stats
from tandem.types import KV_TIERS, FinishReason

log = logging.getLogger(__name__)

# KV event kinds for blocks in the shared store (read by tandem/router/prefix_index.py)
STORE_STORED = "store_stored"
STORE_REMOVED = "store_removed"


@dataclass
class SaveBook:
    """Keys of the blocks each pending save covers, from the scheduler side to the worker side
    (a KVSave carries block hashes; a key also names the model, layout and tenant)."""

    keys: dict[str, tuple[str, ...]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def put(self, request_id: str, keys: tuple[str, ...]) -> None:
        with self.lock:
            self.keys[request_id] = keys

    def pop(self, request_id: str) -> tuple[str, ...]:
        with self.lock:
            return self.keys.pop(request_id, ())


class TieredScheduler(KVConnectorScheduler):
    def __init__(self, stack: TierStack, keyspace: KeySpace, cost: CostModel, book: SaveBook,
                 block_size: int, hash_seed: int) -> None:
        self.stack = stack
        self.keyspace = keyspace
        self.cost = cost
        self.book = book
        self.block_size = block_size
        self.hash_seed = hash_seed
        self._hashes: dict[str, list[int]] = {}   # request id -> hashes of its full blocks so far
        self._plans: dict[str, LoadPlan] = {}     # matched, not yet loaded
        self._queried: set[str] = set()           # requests whose lookup is counted

    def _block_hashes(self, req: KVRequest) -> list[int]:
        hashes = self._hashes.setdefault(req.request_id, [])
        tokens = req.all_token_ids
        if len(hashes) < len(tokens) // self.block_size:
            hashes.extend(hash_request_blocks(tokens, self.block_size, req.cache_keys, self.hash_seed,
                                              start=len(hashes), parent=hashes[-1] if hashes else None))
        return hashes

    def match(self, req: KVRequest, num_local_tokens: int, block_size: int) -> ExternalMatch | None:
        self._plans.pop(req.request_id, None)
        # the handoff pulls a handed-over request's KV (the scheduler never offers a scored prompt)
        if req.kv_handle is not None:
            return None
        first = num_local_tokens // block_size
        last = (len(req.all_token_ids) - 1) // block_size   # the last token is always computed
        if first >= last:
            return None
        keys = self.keyspace.keys(self._block_hashes(req)[first:last], req.cache_keys, self.block_size,
                                  first)
        tiers = self.stack.locate(keys)
        if req.request_id not in self._queried:
            self._queried.add(req.request_id)
            for tier in self.stack.tiers:
                tier.count(queries=(last - first) * block_size)
        n = self.cost.prefix_to_load(tiers)
        if n == 0:
            return None
        plan = LoadPlan(tuple(keys[:n]), tuple(tiers[:n]))
        self._plans[req.request_id] = plan
        return ExternalMatch(first * block_size, n * block_size, load_async=plan.is_async, cache_hit=True)

    def load(self, req: KVRequest, match: ExternalMatch, first_block: int,
             dst_block_ids: Sequence[int]) -> KVLoad:
        plan = self._plans.pop(req.request_id)
        assert len(dst_block_ids) == len(plan.keys), "one new block per planned block"
        for tier, start, end in plan.runs():
            self.stack[tier].count(hits=(end - start) * self.block_size)
        return KVLoad(req.request_id, first_block, tuple(dst_block_ids), plan)

    def request_finished(self, req: KVRequest, block_ids: Sequence[int], block_hashes: Sequence[int],
                         admitted: bool) -> FinishedKV:
        self._hashes.pop(req.request_id, None)
        self._plans.pop(req.request_id, None)
        self._queried.discard(req.request_id)
        if not admitted or req.finish_reason is FinishReason.ERROR:
            return NOTHING_KEPT   # never computed, or computed by a step that failed
        num_full = min(req.num_computed_tokens // self.block_size, len(block_hashes), len(block_ids))
        keys = self.keyspace.keys(block_hashes[:num_full], req.cache_keys, self.block_size)
        todo = [i for i, key in enumerate(keys) if self.stack.needs_saving(key)]
        if not todo:
            return NOTHING_KEPT
        self.book.put(req.request_id, tuple(keys[i] for i in todo))
        save = KVSave(req.request_id, tuple(block_ids[i] for i in todo),
                      tuple(block_hashes[i] for i in todo), num_full * self.block_size)
        return FinishedKV(keep_blocks=True, saves=(save,))


class TieredWorker(KVConnectorWorker):
    def __init__(self, stack: TierStack, kv_cache: torch.Tensor, cost: CostModel, book: SaveBook,
                 config: KVStoreConfig, block_size: int, keyspace: KeySpace | None = None) -> None:
        self.stack = stack
        self.keyspace = keyspace   # names demoted blocks (the scheduler side names the rest)
        self.demoted = 0           # retained blocks copied to the host tier at eviction
        # [num_blocks, block_nbytes] uint8 view of the device KV cache: block i is row i
        self.blocks = kv_cache.view(torch.uint8).view(kv_cache.shape[0], -1)
        self.cost = cost
        self.book = book
        self.config = config
        self.block_size = block_size
        self.events: KVEventLog | None = None   # the engine's, set by its assembly (tandem/engine/assembly.py)
        self._loader = ThreadPoolExecutor(1, thread_name_prefix="kvstore-load", initializer=compute_alone)
        self._saver = ThreadPoolExecutor(1, thread_name_prefix="kvstore-save", initializer=compute_alone)
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="kvstore-write", initializer=compute_alone)
        self._lock = threading.Lock()
        self._loaded: list[str] = []
        self._failed: dict[str, str] = {}
        self._released: list[str] = []
        self._pending_saves: set[str] = set()   # saves not copied yet (drop skips their copy)
        self._dropped: set[str] = set()
        self._in_flight = 0          # load and save jobs not finished (writes excluded)
        self._backlog_bytes = 0      # copies waiting for the writer

    def attach_events(self, events: KVEventLog) -> None:
        self.events = events

    # --- loads ---------------------------------------------------------------------------------
    def start_loads(self, loads: Sequence[KVLoad]) -> dict[str, str]:
        failed: dict[str, str] = {}
        for load in loads:
            if load.source.is_async:
                self._submit(self._loader, self._load_async, load)
                continue
            reason = self._load(load)
            if reason is not None:
                failed[load.request_id] = reason
        return failed

    def _load_async(self, load: KVLoad) -> None:
        try:
            reason = self._load(load)
        except Exception as exc:   # a tier bug must not leave the request waiting forever
            log.exception("KV tier load for %s failed", load.request_id)
            reason = f"{type(exc).__name__}: {exc}"
        with self._lock:
            if reason is None:
                self._loaded.append(load.request_id)
            else:
                self._failed[load.request_id] = reason

    def _load(self, load: KVLoad) -> str | None:
        """Read the planned blocks into the request's blocks; the reason if it fell short."""
        plan: LoadPlan = load.source
        dst = [self.blocks[b] for b in load.dst_block_ids]
        batch = self.config.batch_blocks
        for tier_name, start, end in plan.runs():
            tier = self.stack[tier_name]
            for at in range(start, end, batch):
                stop = min(end, at + batch)
                began = time.perf_counter()
                n = tier.read(plan.keys[at:stop], dst[at:stop])
                self.cost.observe(tier_name, stop - at, time.perf_counter() - began)
                if n < stop - at:
                    self._uncount_hits(plan)
                    return f"the {tier_name} tier no longer holds block {at + n} of the load"
        self._promote(plan, load.dst_block_ids)
        return None

    def _uncount_hits(self, plan: LoadPlan) -> None:
        for tier, start, end in plan.runs():
            self.stack[tier].count(hits=-(end - start) * self.block_size)

    def _promote(self, plan: LoadPlan, block_ids: Sequence[int]) -> None:
        """Blocks read from disk or the store go up into host memory (before the load is
        reported: the blocks are the request's until then)."""
        host = self.stack.get("host")
        lower = [i for i, t in enumerate(plan.tiers) if t != "host"]
        if host is None or not lower:
            return
        rows = self.blocks.index_select(0, torch.tensor([block_ids[i] for i in lower],
                                                        device=self.blocks.device)).cpu()
        host.write([plan.keys[i] for i in lower], rows)

    # --- saves ---------------------------------------------------------------------------------
    def start_saves(self, saves: Sequence[KVSave]) -> None:
        for save in saves:
            with self._lock:
                self._pending_saves.add(save.request_id)
            self._submit(self._saver, self._save, save, self.book.pop(save.request_id))

    def _save(self, save: KVSave, keys: tuple[str, ...]) -> None:
        try:
            if save.request_id in self._dropped or not keys:
                return
            # [n, block_nbytes] CPU copy of the kept blocks; after it they may be freed
            rows = self.blocks.index_select(0, torch.tensor(save.block_ids, device=self.blocks.device)).cpu()
        finally:
            with self._lock:
                self._pending_saves.discard(save.request_id)
                self._dropped.discard(save.request_id)
                self._released.append(save.request_id)
        host = self.stack.get("host")
        if host is not None:   # in batches: a sync load on the engine thread waits for the tier's lock
            for at in range(0, len(keys), self.config.batch_blocks):
                host.write(keys[at:at + self.config.batch_blocks], rows[at:at + self.config.batch_blocks])
        lower = [t for t in self.stack.tiers if t.name != "host"]
        if not lower:
            return
        nbytes = rows.numel()
        with self._lock:
            room = self._backlog_bytes + nbytes <= self.config.max_pending_save_bytes
            if room:
                self._backlog_bytes += nbytes
        if not room:
            for t in lower:
                t.count(skipped=len(keys))
            return
        self._writer.submit(self._write_lower, keys, rows)

    def _write_lower(self, keys: tuple[str, ...], rows: torch.Tensor) -> None:
        try:
            batch = self.config.batch_blocks
            for tier in self.stack.tiers:
                if tier.name == "host":
                    continue
                for at in range(0, len(keys), batch):
                    tier.write(keys[at:at + batch], rows[at:at + batch])
                if tier.name == "store" and tier.available:
                    held = [k for k, h in zip(keys, tier.contains_many(keys)) if h]
                    self.stack.known_in_store(held)
                    if self.events is not None and held:
                        self.events.append(STORE_STORED, tuple(block_hash_of(k) for k in held))
        except Exception:
            log.exception("writing KV blocks to the lower tiers failed")
        finally:
            with self._lock:
                self._backlog_bytes -= rows.numel()

    # --- demotion of retained blocks (tandem/kv/retention.py) -----------------------------------
    def demote(self, blocks: Sequence[tuple[int, int, tuple, int]]) -> None:
        """Retained blocks about to be overwritten: those the host tier lacks (the write-through
        at finish skipped them, or the tier evicted them since) are copied into it now, on the
        engine thread, before the step's forward (the write-through gave the lower tiers theirs)."""
        host = self.stack.get("host")
        if host is None or self.keyspace is None:
            return
        todo = [(b, key) for b, h, keys, pos in blocks
                for key in self.keyspace.keys([h], keys, self.block_size, pos) if not host.contains(key)]
        if not todo:
            return
        ids = torch.tensor([b for b, _ in todo], device=self.blocks.device)
        rows = self.blocks.index_select(0, ids).cpu()   # [n, block_nbytes]
        keys = tuple(key for _, key in todo)
        host.write(keys, rows)
        self.demoted += len(keys)

    # --- the rest of the interface -------------------------------------------------------------
    def _submit(self, pool: ThreadPoolExecutor, fn, *args) -> None:
        with self._lock:
            self._in_flight += 1

        def run() -> None:
            try:
                fn(*args)
            finally:
                with self._lock:
                    self._in_flight -= 1

        pool.submit(run)

    def give_up(self, handle) -> None:
        pass   # no KV handles here

    def drop(self, request_id: str) -> None:
        with self._lock:
            if request_id in self._pending_saves:
                self._dropped.add(request_id)

    def poll(self) -> ConnectorEvents:
        missing, self.stack.store_misses = self.stack.store_misses, []
        if missing and self.events is not None:
            self.events.append(STORE_REMOVED, tuple(block_hash_of(k) for k in missing))
        with self._lock:
            events = ConnectorEvents(self._loaded, self._failed, self._released)
            self._loaded, self._failed, self._released = [], {}, []
        return events

    def busy(self) -> bool:
        with self._lock:
            return bool(self._in_flight or self._loaded or self._failed or self._released)

    def wait_idle(self, timeout_s: float = 30.0) -> bool:
        """Block until every load, save and lower-tier write started so far is done (tests,
        benchmarks, shutdown)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if not self._in_flight and not self._backlog_bytes:
                    return True
            time.sleep(0.002)
        return False

    def close(self) -> None:
        for pool in (self._loader, self._saver, self._writer):
            pool.shutdown(wait=True)
        self.stack.close()

    def tier_stats(self) -> tuple[float, ...]:
        return kv_tier_stats(self.stack)

    def tier_weights(self) -> tuple[float, ...]:
        return self.cost.weights(KV_TIERS)


def tiered_connector(stack: TierStack, kv_cache: torch.Tensor, keyspace: KeySpace, cost: CostModel,
                     config: KVStoreConfig, block_size: int, hash_seed: int) -> KVConnector:
    book = SaveBook()
    return KVConnector(TieredScheduler(stack, keyspace, cost, book, block_size, hash_seed),
                       TieredWorker(stack, kv_cache, cost, book, config, block_size, keyspace))
