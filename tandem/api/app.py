"""build_app(backend, config): the HTTP app of a worker or of the gateway (each passes its own Backend).

Routes: OpenAI (/v1/..., the Responses API at /v1/responses), Anthropic's Messages
(/v1/messages), Workers AI (/client/v4/...), internal (/internal/...), /health, /metrics; with a
queue, the batch API and the usage ledger (/client/v4/accounts/{id}/ai/usage, /admin/usage).
Authentication (tandem/api/auth.py), when keys, accounts or a cluster secret are configured:
tenant keys and account tokens guard the API routes, the cluster secret /internal/*, an operator's
token (admin scope) or the cluster secret /admin/*; /health, /livez and /metrics stay open. With accounts
(config.accounts), the admin API (/admin/*, tandem/api/admin/admin_api.py) manages them, in the
queue's database. CORS
headers answer the configured browser origins (all by default, as vLLM). A DisconnectGuard
cancels a request whose client left (streaming or not), which closes its backend streams and so
aborts its engine requests. Middleware is plain ASGI: Starlette's BaseHTTPMiddleware would sit
between the stream and the disconnect and delay cancellation.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
from collections.abc import Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from tandem.accounts.service import Accounts
from tandem.api.admin.admin_api import admin_routes
from tandem.api.anthropic.messages_api import messages_routes
from tandem.api.auth import BearerAuth
from tandem.api.backend import Backend
from tandem.api.config import ServerConfig
from tandem.api.context import ServerContext
from tandem.api.disconnect import DisconnectGuard
from tandem.api.drain import DrainGate
from tandem.api.errors import error_response_for_path
from tandem.api.internal.internal_api import internal_routes
from tandem.api.openai.openai_api import openai_routes
from tandem.api.openai.responses_api import responses_routes
from tandem.api.openai.tokenize_api import tokenize_routes
from tandem.api.queue.routes import JOB_RUNNERS, queue_routes
from tandem.api.queue.service import QueueService, QueueSetup
from tandem.api.responses import json_response
from tandem.api.tracing import TraceMiddleware
from tandem.api.usage_api import MeterOpening, usage_routes
from tandem.api.workers_ai.queued_api import queued_request
from tandem.api.workers_ai.workers_ai_api import workers_ai_routes
from tandem.errors import InvalidRequest
from tandem.tracing.tracer import make_tracer

Hook = Callable[[], Awaitable[None]]


def _health_routes(ctx: ServerContext) -> list[Route]:
    async def health(request: Request) -> Response:
        if ctx.drain.draining:
            return json_response({"status": "draining"}, status=503)
        # a backend over remote workers (the gateway) is ready only while it can serve a request
        detail = ctx.readiness.health_detail() if ctx.readiness is not None else {}
        if ctx.ready and (ctx.readiness is None or ctx.readiness.ready()):
            return json_response({"status": "ok", **detail})
        return json_response({"status": "starting" if not ctx.ready else "no healthy worker",
                              **detail}, status=503)

    async def livez(request: Request) -> Response:
        # liveness: the process answers; /health is readiness (docs/dev/contracts.md)
        return json_response({"status": "alive"})

    async def metrics(request: Request) -> Response:
        return Response(ctx.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    async def version(request: Request) -> Response:
        return json_response({"version": _package_version()})

    return [Route("/health", health, methods=["GET"]),
            Route("/livez", livez, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/version", version, methods=["GET"])]


def _package_version() -> str:
    try:
        return importlib.metadata.version("tandem")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown"


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    err = InvalidRequest(f"{request.method} {request.url.path}: {exc.detail}")
    err.status = exc.status_code  # type invalid_request_error, as OpenAI's "Invalid URL"
    return error_response_for_path(request.url.path, err)


def build_app(backend: Backend, config: ServerConfig, *, startup: Hook | None = None,
              shutdown: Hook | None = None, extra_routes: Sequence[BaseRoute] = (),
              queue: QueueSetup | None = None) -> Starlette:
    """The HTTP app over `backend`. `startup`/`shutdown` run in the lifespan (a worker passes
    AsyncEngine.start/shutdown); /health answers 200 only between them. With `queue`, the app
    also serves the asynchronous batch API (tandem/api/queue/service.py), dispatching queued work
    through `backend` between startup and shutdown."""
    ctx = ServerContext.create(backend, config)
    tracer = make_tracer(config.tracing)   # no-op without an OTLP endpoint
    service = QueueService(ctx, queue, JOB_RUNNERS) if queue is not None else None
    accounts = _accounts(config, queue)
    # rate limits and the usage ledger live in the queue's database (tandem/api/usage_api.py)
    metering = MeterOpening(ctx, config.usage, queue.config.target) \
        if queue is not None and config.usage.enabled else None

    @asynccontextmanager
    async def lifespan(app: Starlette):
        if accounts is not None:
            await accounts.start()
        if startup is not None:
            await startup()
        try:
            ctx.tokenize_shared_prefixes()   # with the tokenizer the backend loaded
        except ValueError:
            if shutdown is not None:
                await shutdown()
            if accounts is not None:
                await accounts.stop()
            raise
        if metering is not None:
            await metering.start()
        if service is not None:
            await service.start()
        ctx.ready = True
        try:
            yield
        finally:
            ctx.ready = False
            if service is not None:
                await service.stop()
            if metering is not None:
                await metering.stop()
            if shutdown is not None:
                await shutdown()
            if accounts is not None:
                await accounts.stop()
            await asyncio.to_thread(tracer.shutdown)   # the spans of the last requests, bounded

    routes = [*openai_routes(ctx), *responses_routes(ctx), *messages_routes(ctx),
              *tokenize_routes(ctx), *workers_ai_routes(ctx), *internal_routes(ctx),
              *_health_routes(ctx), *extra_routes]
    if service is not None:
        ctx.queued = partial(queued_request, service)
        routes += queue_routes(service)
    if accounts is not None:
        routes += admin_routes(accounts)
    if metering is not None:
        routes += usage_routes(ctx)
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: _http_error})
    if config.api_keys or config.cluster_secret or accounts is not None:
        app.add_middleware(BearerAuth, keys=config.api_keys, cluster_secret=config.cluster_secret,
                           accounts=accounts)
    if config.allowed_origins:  # outside the authentication: a browser's preflight carries no key
        app.add_middleware(CORSMiddleware, allow_origins=list(config.allowed_origins),
                           allow_methods=["*"], allow_headers=["*"])
    app.add_middleware(DrainGate, state=ctx.drain)   # refuses new generation calls while draining
    # a span per request (tandem/api/tracing.py); inside the guard, so a client that leaves
    # ends its span as cancelled
    app.add_middleware(TraceMiddleware, tracer=tracer, model_name=lambda: ctx.served_name)
    app.add_middleware(DisconnectGuard)   # outermost: it cancels the whole request on a disconnect
    app.state.ctx = ctx
    app.state.queue = service
    app.state.accounts = accounts
    app.state.tracer = tracer
    return app


def _accounts(config: ServerConfig, queue: QueueSetup | None) -> Accounts | None:
    """With config.accounts, the account store in the queue's database (tandem/accounts)."""
    if not config.accounts:
        return None
    if queue is None:
        raise ValueError("accounts are kept in the queue's database: this app has no queue")
    return Accounts(queue.config.target, config.token_cache_ttl_s)
