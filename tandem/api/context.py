"""What every route of one app shares: the backend and what it can do, the config, the metrics."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from starlette.requests import Request
from starlette.responses import Response

from tandem.api.backend import (
    Backend,
    KVEventSource,
    KVHandoffSource,
    Readiness,
    WorkerBackend,
    missing_members,
    provides,
)
from tandem.api.config import ServerConfig
from tandem.api.drain import DrainState
from tandem.api.metering import RunMeter
from tandem.api.metrics import ServerMetrics
from tandem.api.openai.logprobs_format import TokenTexts
from tandem.api.openai.openai_format import system_fingerprint
from tandem.api.openai.openai_protocol import ParseContext
from tandem.api.run import GenerationRun
from tandem.kv.shared_prefixes import SharedPrefixes
from tandem.turn.parser_setup import ParserSetup
from tandem.turn.shared_prefix_file import render_shared_prefix
from tandem.types import EngineRequest
from tandem.usage.meter import Meter

log = logging.getLogger(__name__)


@dataclass
class ServerContext:
    backend: Backend
    config: ServerConfig
    metrics: ServerMetrics
    # What the backend can do beyond Backend, decided once here (None: it cannot). Each is the
    # backend itself, typed by the protocol it satisfies.
    worker: WorkerBackend | None = None        # owns a KV cache: /internal/stats reports it
    kv_events: KVEventSource | None = None     # /internal/kv_events (404 without)
    kv_handoff: KVHandoffSource | None = None  # /internal/kv_release (404 without)
    readiness: Readiness | None = None         # /health asks it too
    ready: bool = False  # set by the app's lifespan once the backend has started
    # rate limits and the usage ledger (tandem/usage/meter.py); None: not metered (no queue
    # database, or a worker under a gateway)
    meter: Meter | None = None
    drain: DrainState = field(default_factory=DrainState)   # a worker stopping (tandem/api/drain.py)
    # Workers AI's `?queueRequest=true` handler when the app has a queue (tandem/api/queue/service.py)
    queued: Callable[[Request], Awaitable[Response]] | None = None
    # the operator's shared prefixes as token ids, set once the backend has started
    shared: SharedPrefixes = SharedPrefixes()
    instance_id: str = field(default_factory=lambda: uuid.uuid4().hex)  # new per app
    _texts: TokenTexts | None = field(default=None, repr=False)
    _parsers: ParserSetup | None = field(default=None, repr=False)

    @classmethod
    def create(cls, backend: Backend, config: ServerConfig) -> "ServerContext":
        missing = missing_members(backend, Backend)
        if missing:
            raise TypeError(f"{type(backend).__name__} is not a tandem.api.backend.Backend: "
                            f"it lacks {', '.join(missing)}")
        holder: list[ServerContext] = []
        metrics = ServerMetrics(stats=backend.stats, model_name=lambda: holder[0].served_name)
        ctx = cls(backend=backend, config=config, metrics=metrics,
                  worker=backend if provides(backend, WorkerBackend) else None,
                  kv_events=backend if provides(backend, KVEventSource) else None,
                  kv_handoff=backend if provides(backend, KVHandoffSource) else None,
                  readiness=backend if provides(backend, Readiness) else None)
        holder.append(ctx)
        return ctx

    # Backend attributes are read lazily: a backend may load its model in start().
    @property
    def served_name(self) -> str:
        return self.config.served_model_name or self.backend.model_name

    @property
    def fingerprint(self) -> str:
        return system_fingerprint(self.served_name)

    @property
    def token_texts(self) -> TokenTexts:
        if self._texts is None:
            self._texts = TokenTexts(self.backend.tokenizer)
        return self._texts

    @property
    def parsers(self) -> ParserSetup:
        """The output parsers, resolved against the model's chat template on first use."""
        if self._parsers is None:
            c = self.config
            self._parsers = ParserSetup.resolve(c.tool_call_parser, c.reasoning_parser,
                                                self.backend.tokenizer, c.constrain_auto_tool_calls,
                                                c.tool_call_guard)
        return self._parsers

    def parse_context(self) -> ParseContext:
        return ParseContext(served_name=self.served_name, tokenizer=self.backend.tokenizer,
                            max_model_len=self.backend.max_model_len, max_n=self.config.max_n,
                            max_prompts=self.config.max_prompts, parsers=self.parsers,
                            defaults=self.config.sampling_defaults)

    def tokenize_shared_prefixes(self) -> None:
        """Render the declared shared prefixes with the backend's tokenizer (at start-up, once
        the backend has loaded it; a ValueError names the entry that fails)."""
        decls = self.config.shared_prefixes
        if not decls:
            return
        tokenizer = self.backend.tokenizer
        ids = tuple(render_shared_prefix(d, tokenizer) for d in decls)
        self.shared = SharedPrefixes(ids)
        for d, p in zip(decls, ids):
            log.info("shared prefix %s: %d tokens", d.name or d.source, len(p))

    def run(self, requests: list[EngineRequest], choices_per_prompt: int = 1,
            metered: bool = True, prepared: bool = False) -> GenerationRun:
        """A run of a client's request: rate-limited and recorded when the app meters
        (`metered=False`: the internal API's and queued jobs', which are metered per job).
        Each request's context gets its shared-prefix tokens here, unless `prepared` (the
        internal API's: the gateway that built the request set them)."""
        if self.shared and not prepared:
            for req in requests:
                req.context = replace(req.context,
                                      shared_prefix_tokens=self.shared.match(req.prompt_token_ids))
        meter = RunMeter(self.meter, requests, self.served_name, choices_per_prompt) \
            if metered and self.meter is not None else None
        return GenerationRun(self.backend, requests, self.metrics, meter)
