"""The gateway's HTTP app: tandem.api's routes over the GatewayBackend, plus worker management.

Routes: everything `tandem.api.app.build_app` serves (OpenAI, Workers AI, /health, /metrics),
with the gateway's metrics added to /metrics, and
- POST /internal/register   {"url", "role", "draining"?} - a worker registers; repeated as heartbeat
  (a first one is checked: tandem/gateway/registration_check.py)
- POST /internal/deregister {"url"}                      - a worker leaves (after draining)
- POST /internal/drain      {"url"}                      - stop sending new requests to a worker
- GET  /internal/workers                                 - the registry, for people and tests
- GET  /internal/planner                                 - the planner's latest role switch (--slo-*);
  the gateway carries out those of self-registered workers (tandem/gateway/role_executor.py)
/internal routes take only the cluster secret (tandem/api/auth.py); the gateway presents it on
every call to its workers (its HTTP client sends it with each request).
503 and 429 answers carry Retry-After. x-session-affinity reaches the routing policy inside each
engine request's RequestContext (built by the server's routes, tandem.api.request_context).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tandem import cluster_secret
from tandem.api.app import build_app
from tandem.api.config import ServerConfig
from tandem.api.errors import openai_error_response
from tandem.api.queue.service import QueueSetup
from tandem.api.request_body import read_json_object
from tandem.api.responses import json_response
from tandem.errors import InvalidRequest
from tandem.gateway.admission.setup import build_gate
from tandem.gateway.config import GatewayConfig
from tandem.gateway.conversation import assistant_marker
from tandem.gateway.metrics import GatewayMetrics
from tandem.gateway.monitor import Monitor
from tandem.gateway.pd_flow import GatewayBackend, GatewayParts
from tandem.gateway.planner_loop import PlannerLoop, planner_route
from tandem.gateway.queue_headroom import gateway_headroom
from tandem.gateway.registration_check import RegistrationCheck
from tandem.gateway.registry import Registry, normalize_url
from tandem.gateway.role_executor import ExecutorConfig, RoleExecutor
from tandem.gateway.worker_client import WorkerHTTP
from tandem.http.client import ClientConfig, HTTPClient
from tandem.models.arch import ModelArch
from tandem.router.load_tracker import LoadTracker
from tandem.router.policies import make_policy
from tandem.router.prefix_index import PrefixIndex
from tandem.router.routed_prefixes import RoutedPrefixes
from tandem.router.router import Router, pools_policies
from tandem.tokenization.tokenizer import Tokenizer, warm_chat_template

log = logging.getLogger(__name__)


class RetryAfter:
    """Adds `Retry-After: N` to 503 and 429 answers that lack one."""

    def __init__(self, app: ASGIApp, seconds: int) -> None:
        self.app = app
        self.value = str(seconds).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] in (429, 503):
                headers = list(message.get("headers", []))
                if not any(k.lower() == b"retry-after" for k, _ in headers):
                    headers.append((b"retry-after", self.value))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_header)


def model_facts(model_path: str | None, served_name: str | None,
                chat_template: str | None = None) -> tuple[object, str, int]:
    """(tokenizer, served model name, max_model_len) from the model directory (its chat templates
    replaced by `chat_template` when given)."""
    if model_path is None:
        raise SystemExit("tandem gateway needs --model PATH: it tokenizes with the model's tokenizer "
                         "and chat template to hash prompt prefixes like the workers do")

    path = Path(model_path)
    tokenizer = Tokenizer.from_dir(path, chat_template)
    warm_chat_template(tokenizer)
    # the workers' default context; the gateway serves the smallest its workers report
    max_len = ModelArch.from_dir(path).context_length()
    return tokenizer, served_name or path.resolve().name, max_len


def _management_routes(registry: Registry, monitor: Monitor,
                       admission: RegistrationCheck) -> list[Route]:
    async def url_of(request: Request) -> tuple[dict, str]:
        body = await read_json_object(request, 65536)
        url = body.get("url")
        if not isinstance(url, str) or not url:
            raise InvalidRequest("'url' must be the worker's base URL, e.g. http://10.0.0.5:8001",
                                 param="url")
        return body, url

    async def register(request: Request) -> Response:
        try:
            body, url = await url_of(request)
            role = body.get("role", "both")
            draining = bool(body.get("draining", False))
            if registry.get(url) is None:   # a first registration: can it be reached?
                await admission.check(normalize_url(url))
            try:
                w = registry.heartbeat(url, role, time.monotonic(), draining=draining)
            except ValueError as exc:
                raise InvalidRequest(str(exc), param="role") from exc
        except Exception as exc:  # noqa: BLE001 - answered as an OpenAI-style error
            return openai_error_response(exc)
        if not w.healthy:
            asyncio.ensure_future(monitor.poll_worker(w))  # become routable without waiting a round
        return json_response({"ok": True, "url": w.url, "role": w.role,
                              "heartbeat_interval_s": registry.config.heartbeat_interval_s})

    async def deregister(request: Request) -> Response:
        try:
            _, url = await url_of(request)
        except Exception as exc:  # noqa: BLE001
            return openai_error_response(exc)
        w = registry.remove(url)
        if w is not None:
            monitor.forget(w.url)
        return json_response({"ok": w is not None})

    async def drain(request: Request) -> Response:
        try:
            _, url = await url_of(request)
        except Exception as exc:  # noqa: BLE001
            return openai_error_response(exc)
        return json_response({"ok": registry.drain(url)})

    async def workers(request: Request) -> Response:
        load = monitor.tracker.load
        return json_response({"workers": [
            {"url": w.url, "role": w.role, "healthy": w.healthy, "draining": w.draining,
             "static": w.static, "failures": w.failures, "switching_to": w.switching_to,
             "cached_blocks": monitor.index.num_blocks(w.url),
             "inflight_prefill_tokens": load(w.url).prefill_tokens,
             "inflight_decode_tokens": load(w.url).decode_tokens,
             "inflight_requests": load(w.url).in_flight} for w in registry.all()]})

    return [Route("/internal/register", register, methods=["POST"]),
            Route("/internal/deregister", deregister, methods=["POST"]),
            Route("/internal/drain", drain, methods=["POST"]),
            Route("/internal/workers", workers, methods=["GET"])]


def build_gateway_app(config: GatewayConfig, tokenizer, model_name: str, max_model_len: int,
                      worker_http: WorkerHTTP | None = None) -> Starlette:
    """`worker_http` replaces the gateway's HTTP client to workers (tests)."""
    registry = Registry(config.registry)
    for url in config.workers:
        registry.add_static(url, None)
    for url in config.prefill:
        registry.add_static(url, "prefill")
    for url in config.decode:
        registry.add_static(url, "decode")
    index, tracker = PrefixIndex(), LoadTracker()
    policies = pools_policies(make_policy(config.policy),
                              make_policy(config.prefill_policy) if config.prefill_policy else None,
                              make_policy(config.decode_policy) if config.decode_policy else None)
    # a routed prompt counts as cached until the worker's events have had a few polls to tell
    routed = RoutedPrefixes(ttl_s=max(10.0, 4 * config.registry.poll_interval_s))
    router = Router(registry, index, tracker, policies, config.admission, routed=routed)
    http = worker_http or HTTPClient(ClientConfig(
        connect_timeout_s=config.connect_timeout_s,
        headers=tuple(cluster_secret.headers(config.cluster_secret).items())))
    # a worker given up has its connections aborted (a test's own HTTP layer has none to abort)
    monitor = Monitor(registry, index, tracker, http,
                      on_lost=http.abort if isinstance(http, HTTPClient) else (lambda url: None),
                      routed=routed)
    parts = GatewayParts(config, registry, router, tracker, http, None, monitor.forget,
                         marker=assistant_marker(tokenizer))
    backend = GatewayBackend(parts, tokenizer, model_name, max_model_len)
    stop = asyncio.Event()
    tasks: list[asyncio.Task] = []
    planner: list[PlannerLoop] = []   # with --slo-ttft-ms / --slo-itl-ms, once the metrics exist

    async def startup() -> None:
        await monitor.poll_once()
        tasks.append(asyncio.create_task(monitor.run(stop)))
        tasks.extend(asyncio.create_task(p.run(stop)) for p in planner)

    async def shutdown() -> None:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        if parts.gate is not None:
            await parts.gate.close()
        for p in planner:
            if p.executor is not None:
                await p.executor.close()
        if worker_http is None:   # ours to close
            await http.aclose()

    server_config = ServerConfig(served_model_name=config.served_model_name,
                                 api_keys=config.api_keys, cluster_secret=config.cluster_secret,
                                 accounts=config.accounts,
                                 token_cache_ttl_s=config.token_cache_ttl_s,
                                 allowed_origins=config.allowed_origins,
                                 share_prefix_cache=config.share_prefix_cache,
                                 shared_prefixes=config.shared_prefixes,
                                 host=config.host, port=config.port,
                                 sampling_defaults=config.sampling_defaults,
                                 tool_call_parser=config.tool_call_parser,
                                 reasoning_parser=config.reasoning_parser,
                                 constrain_auto_tool_calls=config.constrain_auto_tool_calls,
                                 tool_call_guard=config.tool_call_guard, usage=config.usage,
                                 tracing=config.tracing)
    queue = None if config.queue is None else QueueSetup(
        config.queue, gateway_headroom(registry, tracker, config.queue.headroom_prefill_tokens))
    app = build_app(backend, server_config, startup=startup, shutdown=shutdown,
                    extra_routes=[*_management_routes(registry, monitor, RegistrationCheck(
                        config.registry, config.host, http)), planner_route(planner)],
                    queue=queue)
    metrics = GatewayMetrics(app.state.ctx.metrics.registry, registry, tracker)
    if config.planner.enabled:
        server_metrics = app.state.ctx.metrics
        executor = RoleExecutor(registry, http, server_metrics.registry,
                                ExecutorConfig(drain_timeout_s=config.role_switch_drain_s))
        planner.append(PlannerLoop(config.planner, server_metrics.ttft, server_metrics.itl, registry,
                                   tracker, server_metrics.registry, executor=executor))
    parts.metrics = metrics
    parts.tracer = app.state.tracer   # the app's: its calls to workers are its requests' children
    parts.gate = build_gate(config, router, registry, tracker, app.state.ctx.metrics.registry)
    router.on_decision = metrics.on_decision
    # build_app installed the app's one DisconnectGuard; it cancels the request's task, so the
    # middlewares added outside it see the cancelled request end like any other
    app.add_middleware(RetryAfter, seconds=config.retry_after_s)
    app.state.gateway = parts
    app.state.monitor = monitor
    return app
