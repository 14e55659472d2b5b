"""The async front: submit, stream, abort, with the engine loop on its own thread.

The HTTP event loop never runs model code. Commands (add, abort) cross to the engine thread
through a queue; each step's deltas cross back in one `call_soon_threadsafe` call, which
fans them out to the requests' asyncio queues.

Invariants: every accepted request gets exactly one final delta (finished=True) unless its
stream was abandoned, in which case the request is aborted and its blocks freed within a step.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import subprocess
import threading
import time
import traceback
from collections.abc import AsyncIterator
from concurrent.futures import Future

from tandem.compute_threads import compute_alone
from tandem.config import EngineConfig
from tandem.engine.engine import Engine
from tandem.engine.thread_governor import ThreadGovernor
from tandem.grammar.compile_process import spawn_helper, stop_helper
from tandem.grammar.compiler import import_in_background
from tandem.kv.events import EventBatch
from tandem.types import EngineRequest, EngineStats, RequestDelta

log = logging.getLogger(__name__)

_IDLE_WAIT_S = 0.05   # engine thread: how long to block on the command queue when idle
_KV_IO_WAIT_S = 0.002  # ... when only KV connector loads or saves are in flight


class AsyncEngine:
    def __init__(self, config: EngineConfig, engine: Engine | None = None) -> None:
        """`engine`: an engine built already (tests); by default start() loads one from config."""
        self.config = config
        self._engine = engine
        self._commands: queue.Queue = queue.Queue()
        self._streams: dict[str, asyncio.Queue] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._stats: EngineStats | None = None
        self._governor = self._thread_governor(config)
        self._grammar_helper: subprocess.Popen | None = None   # prepare_grammars() -> start()
        # one grammar compile at a time: a waiting request waits here, not on a worker thread
        self._compile_slot = asyncio.Lock()

    # --- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        helper, self._grammar_helper = self._grammar_helper, None
        if self._engine is None:
            try:
                self._engine = await asyncio.to_thread(self._load)
            except BaseException:
                if helper is not None:
                    stop_helper(helper)
                raise
        if helper is not None:
            self._engine.grammars.adopt_helper(helper)
        self._stats = self._engine.stats()
        self._thread = threading.Thread(target=self._run, name="tandem-engine", daemon=True)
        self._thread.start()

    def _load(self) -> Engine:
        engine = Engine.from_config(self.config)
        compute_alone()   # the team this executor thread started to load would slow the engine's
        return engine

    def prepare_grammars(self) -> None:
        """Before start(): the grammar compile helper starts now, importing xgrammar (seconds)
        while the weights load, for warm_grammars() to hand it the tokenizer; this process imports
        what reading the vocabulary needs meanwhile."""
        import_in_background()
        if self.config.grammar.compile_timeout_s is not None and self._grammar_helper is None:
            self._grammar_helper = spawn_helper()

    def warm_grammars(self) -> None:
        """Read the vocabulary and start the grammar compile process (the one prepare_grammars()
        started, if any), in the background (a worker at start-up)."""
        self._engine.grammars.warm()

    async def shutdown(self) -> None:
        self._stopping.set()
        self._commands.put(None)
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 30)
        if self._engine is not None:
            self._engine.shutdown()

    @staticmethod
    def _thread_governor(config: EngineConfig) -> ThreadGovernor | None:
        """A CPU worker computing on several threads lends them to other processes' load."""
        import torch

        n = config.num_threads
        if not (config.threads.enabled and n and n > 1 and config.model.device == "cpu"):
            return None
        return ThreadGovernor(n, config.threads, torch.set_num_threads)

    @property
    def thread_governor(self) -> ThreadGovernor | None:
        return self._governor

    @property
    def engine(self) -> Engine:
        return self._engine

    @property
    def model_name(self) -> str:
        return self._engine.loaded.name

    @property
    def model_path(self) -> str:
        return self.config.model.path

    @property
    def max_model_len(self) -> int:
        return self._engine.max_model_len

    @property
    def tokenizer(self):
        return self._engine.tokenizer

    @property
    def kv_layout(self):
        return self._engine.layout

    @property
    def role(self) -> str:
        return self.config.role

    @property
    def transport_address(self) -> str | None:
        return self._engine.transport_address

    # --- requests ----------------------------------------------------------------------------
    async def generate(self, req: EngineRequest, info=None) -> AsyncIterator[RequestDelta]:
        """Stream the request's deltas; raises TandemError before the first one for bad input."""
        compiled = None
        if req.sampling.grammar is not None:   # a spec over a limit or that does not compile: a 400
            compiled = await self._compile(req.sampling.grammar)
        stream: asyncio.Queue = asyncio.Queue()
        accepted: Future = Future()
        self._streams[req.request_id] = stream
        self._commands.put(("add", (req, compiled), accepted))
        try:
            await asyncio.wrap_future(accepted)
        except BaseException:
            self._streams.pop(req.request_id, None)
            # cancel() is atomic with the engine's set_running_or_notify_cancel: either the
            # engine will skip the request, or it took it and must abort it
            if not accepted.cancel() and not (accepted.done() and accepted.exception()):
                self.abort(req.request_id)
            raise
        finished = False
        try:
            while True:
                delta = await stream.get()
                finished = delta.finished
                yield delta
                if finished:
                    return
        finally:
            self._streams.pop(req.request_id, None)
            if not finished:
                self.abort(req.request_id)

    async def _compile(self, spec):
        """The compiled grammar of `spec`: from the cache, else compiled on the compiler's thread
        (grammar/compiler.py), one at a time. The request going (its task cancelled) kills the
        trial compile, which nobody else waits for: a request after it with the same spec
        compiles it again."""
        grammars = self._engine.grammars
        compiled = grammars.cached(spec)
        if compiled is not None:
            return compiled
        async with self._compile_slot:
            compiled = grammars.cached(spec)   # compiled while this request waited
            if compiled is not None:
                return compiled
            cancel = threading.Event()
            try:
                return await asyncio.get_running_loop().run_in_executor(
                    grammars.executor, grammars.compile, spec, cancel)
            except asyncio.CancelledError:
                cancel.set()   # a trial is killed; a compile that passed its trial ends, cached
                raise

    def abort(self, request_id: str) -> None:
        self._commands.put(("abort", request_id, None))

    def release_kv(self, request_id: str) -> None:
        """Prefill role: the gateway gave up on handing this request's blocks over."""
        self._commands.put(("release", request_id, None))

    def stats(self) -> EngineStats:
        return self._stats

    def kv_events(self, since: int) -> EventBatch:
        return self._engine.events.since(since, self._cached_hashes)

    def _cached_hashes(self) -> tuple[int, ...]:
        for _ in range(100):  # the engine thread may resize the dict while we copy it
            try:
                return self._engine.kv.pool.cached_hashes()
            except RuntimeError:
                continue
        return ()

    # --- the engine thread -------------------------------------------------------------------
    def _run(self) -> None:
        engine = self._engine
        while not self._stopping.is_set():
            busy = engine.has_runnable()
            wait = 0.0 if busy else (_KV_IO_WAIT_S if engine.kv_io_in_flight() else _IDLE_WAIT_S)
            deltas = self._drain_commands(wait)
            if self._stopping.is_set():
                break
            if engine.has_work():
                try:
                    deltas += engine.step()
                except Exception:  # a bug or a device fault: fail what is in flight, keep serving
                    log.error("engine step failed:\n%s", traceback.format_exc())
                    deltas += engine.fail_all("internal engine error")
            self._stats = engine.stats()
            if self._governor is not None:
                self._governor.tick(time.monotonic())
            if deltas:
                self._loop.call_soon_threadsafe(self._dispatch, deltas)

    def _drain_commands(self, wait: float) -> list[RequestDelta]:
        deltas: list[RequestDelta] = []
        block = wait > 0
        while True:
            try:
                cmd = self._commands.get(block=block, timeout=wait if block else None)
            except queue.Empty:
                return deltas
            block = False
            if cmd is None:
                return deltas
            kind, arg, accepted = cmd
            if kind == "add":
                # a submitter cancelled before this point (client gone, queued job preempted)
                # left: skip its request. Past it the future cannot be cancelled any more, and
                # a submitter cancelled while waiting aborts the request it added (generate).
                if not accepted.set_running_or_notify_cancel():
                    continue
                try:
                    self._engine.add_request(*arg)   # (request, its compiled grammar or None)
                except BaseException as exc:  # noqa: BLE001 - handed to the submitting coroutine
                    accepted.set_exception(exc)
                else:
                    accepted.set_result(None)
            elif kind == "release":
                self._engine.release_kv(arg)
            elif kind == "abort":
                delta = self._engine.abort(arg)
                if delta is not None:
                    deltas.append(delta)

    def _dispatch(self, deltas: list[RequestDelta]) -> None:
        for delta in deltas:
            stream = self._streams.get(delta.request_id)
            if stream is not None:
                stream.put_nowait(delta)

