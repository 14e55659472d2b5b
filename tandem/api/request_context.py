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
- agent (`with_agent`): the hint `agent.expect_next_turn_s` of the body, else the header
  `x-agent-expect-next-turn-s` (tandem/turn/agent_hint.py: 400 or clamp), and the texts that open
  a tool call in the request's output format (its tool-call parser's markers): a worker keeps a
  session's KV until its next turn when a turn ends in a tool call or with a hint.
The context then travels explicitly: route -> GenerationRun -> Backend.generate(req) inside
`req.context` -> (gateway) the routing flow and the worker's internal API (tandem.api.internal.wire).
- trace: the request's server span (tandem/api/tracing.py), parent of the gateway's worker calls.
"""

from __future__ import annotations

from dataclasses import replace

from starlette.requests import Request

from tandem.api.auth import tenant_of
from tandem.api.config import ServerConfig
from tandem.api.tracing import trace_of
from tandem.parsers.tool_registry import TOOL_PARSER_NAMES, make_tool_parser
from tandem.turn.agent_hint import HEADER as AGENT_HEADER
from tandem.turn.agent_hint import parse_header
from tandem.types import AgentTurn, RequestContext

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


def with_agent(context: RequestContext, request: Request, expect_next_turn_s: float | None) -> RequestContext:
    """`context` with the request's agent turn: the body's hint (`expect_next_turn_s`, read and
    clamped by the route's parser), else the header's; the tool-call markers of context.parser."""
    if expect_next_turn_s is None:
        expect_next_turn_s = parse_header(request.headers.get(AGENT_HEADER))
    name = context.parser.tool_call_parser
    if name is None:
        markers: tuple[str, ...] = ()
    elif name in TOOL_PARSER_NAMES:
        markers = make_tool_parser(name).start_markers
    else:   # a forced call written as plain JSON (turn/json_tools.py): every output is a call
        markers = ("{",)
    return replace(context, agent=AgentTurn(expect_next_turn_s, tuple(markers)))
