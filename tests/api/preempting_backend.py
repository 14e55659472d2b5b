"""An app over a real engine (tiny random model) with the queue, whose backend can preempt the
queued job running through it after a chosen number of its output tokens: for the tests of
queued results (workers_ai/test_queued_api.py, openai/test_batch_api.py)."""

from __future__ import annotations

from tandem.api.app import build_app
from tandem.api.config import ServerConfig
from tandem.api.queue.service import QueueConfig, QueueSetup
from tandem.engine.async_engine import AsyncEngine
from tandem.engine.engine import Engine
from tests.conftest import engine_config

MODEL = "tiny"


class PreemptingBackend:
    """The engine's backend, logging each stream's start and end; once armed (`after`), it
    preempts the queued job running through it after that many of its output tokens."""

    def __init__(self, inner: AsyncEngine) -> None:
        self.inner = inner
        self.after: int | None = None
        self.service = None
        self.log: list[tuple] = []
        self.delivered: dict[str, int] = {}

    @property
    def model_name(self) -> str:
        return self.inner.model_name

    @property
    def max_model_len(self) -> int:
        return self.inner.max_model_len

    @property
    def tokenizer(self):
        return self.inner.tokenizer

    def abort(self, request_id: str) -> None:
        self.inner.abort(request_id)

    def stats(self):
        return self.inner.stats()

    async def generate(self, req, info=None):
        queued = req.context.priority >= QueueConfig.background_priority
        self.log.append(("start", req.request_id, queued, len(req.resume_output_ids)))
        n, finished = len(req.resume_output_ids), False
        gen = self.inner.generate(req, info)
        try:
            async for d in gen:
                n += len(d.new_token_ids)
                finished = d.finished
                yield d
                if queued and self.after is not None and n >= self.after and not finished:
                    self.after = None
                    self.log.append(("preempt", req.request_id, n))
                    self.service.dispatcher.preempt(1)   # cancels the job's task, ours
        finally:
            await gen.aclose()
            self.log.append(("end", req.request_id, finished))
            self.delivered[req.request_id] = n   # output tokens handed on, resumed ones included


def live_app(llama_dir, queue_db):
    """-> (the app, its PreemptingBackend); set `backend.service = app.state.queue` once started."""
    config = engine_config(llama_dir, num_blocks=96, max_num_batched_tokens=64)
    front = AsyncEngine(config, engine=Engine.from_config(config))
    backend = PreemptingBackend(front)
    setup = QueueSetup(QueueConfig(target=str(queue_db), poll_s=0.05, lease_s=10.0),
                       headroom=lambda: True)
    app = build_app(backend, ServerConfig(served_model_name=MODEL, tool_call_parser="hermes"),
                    startup=front.start, shutdown=front.shutdown, queue=setup)
    return app, backend
