"""What every route of one app shares: the backend, the config, the metrics."""

from __future__ import annotations

import inspect
import uuid
from dataclasses import dataclass, field

from tandem.server.backend import Backend
from tandem.server.config import ServerConfig
from tandem.server.logprobs_format import TokenTexts
from tandem.server.metrics import ServerMetrics
from tandem.server.openai_format import system_fingerprint
from tandem.server.openai_protocol import ParseContext
from tandem.server.run import GenerationRun
from tandem.types import EngineRequest


def generate_takes_info(backend: Backend) -> bool:
    """Whether backend.generate accepts the optional ResponseInfo (a backend without response
    headers may implement the plain `generate(req)` of contracts.md)."""
    try:
        params = inspect.signature(backend.generate).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == "info" or p.kind is p.VAR_KEYWORD for p in params) \
        or sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params) >= 2


@dataclass
class ServerContext:
    backend: Backend
    config: ServerConfig
    metrics: ServerMetrics
    pass_info: bool
    ready: bool = False  # set by the app's lifespan once the backend has started
    instance_id: str = field(default_factory=lambda: uuid.uuid4().hex)  # new per app
    _texts: TokenTexts | None = field(default=None, repr=False)

    @classmethod
    def create(cls, backend: Backend, config: ServerConfig) -> "ServerContext":
        holder: list[ServerContext] = []
        metrics = ServerMetrics(stats=backend.stats, model_name=lambda: holder[0].served_name)
        ctx = cls(backend=backend, config=config, metrics=metrics,
                  pass_info=generate_takes_info(backend))
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

    def parse_context(self) -> ParseContext:
        return ParseContext(served_name=self.served_name, tokenizer=self.backend.tokenizer,
                            max_model_len=self.backend.max_model_len, max_n=self.config.max_n,
                            max_prompts=self.config.max_prompts,
                            defaults=self.config.sampling_defaults)

    def run(self, requests: list[EngineRequest]) -> GenerationRun:
        return GenerationRun(self.backend, requests, self.metrics, self.pass_info)
