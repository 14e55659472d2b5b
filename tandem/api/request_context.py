"""The RequestContext of one HTTP request, built once by the route that serves it.

- session_id: the `x-session-affinity` header, trimmed, at most 256 characters; None when the
  header is missing or blank. The gateway routes a session's requests to one worker.
- tenant: the API key the request authenticated with (tandem.api.auth); None without keys.
  It partitions the prefix cache (tandem/kv/block_hash.py: cache_keys) unless the server was
  started with --share-prefix-cache (ServerConfig.share_prefix_cache, copied into the context).
- shared_prefix_tokens: set later, per engine request, by ServerContext.run (--shared-prefixes).
- cache_salt, priority: body fields, as the route's parser read them (OpenAI routes: vLLM's
  `cache_salt` and `priority`, an integer; Anthropic's Messages and Workers AI have neither:
  their requests run at 0). The engine schedules by `priority` (tandem/engine/priority.py).
The context then travels explicitly: route -> GenerationRun -> Backend.generate(req) inside
`req.context` -> (gateway) the routing flow and the worker's internal API (tandem.api.internal.wire).
- trace: the request's server span (tandem/api/tracing.py), parent of the gateway's worker calls.
"""

from __future__ import annotations

from starlette.requests import Request

from tandem.api.auth import tenant_of
from tandem.api.config import ServerConfig
from tandem.api.tracing import trace_of
from tandem.types import RequestContext

SESSION_HEADER = "x-session-affinity"
MAX_SESSION_ID = 256


def session_id(request: Request) -> str | None:
    raw = request.headers.get(SESSION_HEADER)
    if raw is None:
        return None
    return raw.strip()[:MAX_SESSION_ID] or None


def http_context(request: Request, config: ServerConfig, cache_salt: str | None = None,
                 priority: int = 0) -> RequestContext:
    return RequestContext(session_id=session_id(request), tenant=tenant_of(request.scope),
                          cache_salt=cache_salt, priority=priority,
                          share_prefix_cache=config.share_prefix_cache,
                          trace=trace_of(request.scope))
