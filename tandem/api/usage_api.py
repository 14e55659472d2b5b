"""The usage ledger's routes, and the app's meter (rate limits + ledger) over the queue's database.

  GET /client/v4/accounts/{account_id}/ai/usage?since=YYYY-MM-DD&until=YYYY-MM-DD
      the caller's own usage, in Workers AI's envelope: {"result": {"account", "since", "until",
      "usage": [{"day", "model", "requests", "input_uncached_tokens", "input_cached_tokens",
      "output_tokens", "cost_usd"}], "totals": {...}}, "success": true, ...}. The path's account
      must be the caller's tenant ("key-<i>" for an --api-key, an account's id for its token):
      any other answers 404, as an unknown account would. A caller of a server without keys is
      the one anonymous tenant and reads its usage under any account id.
  GET /admin/usage?account=ID&since=&until=
      any account's usage (every account's without `account=`), for operators: plain JSON
      {"object": "usage", "account", "since", "until", "data": [... rows with "account" ...],
      "totals"}. It takes the cluster secret (tandem/api/auth.py treats /admin like /internal)
      until accounts bring the admin scope.
Days are UTC dates, both ends included; `until` defaults to today, `since` to 30 days before
it; a range over 366 days, a bad date or since after until is a 400. Costs come from this
gateway's --pricing (null without one, or for an unpriced model).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from concurrent.futures import Future, ThreadPoolExecutor

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tandem.api.auth import owner_of, tenant_of
from tandem.api.context import ServerContext
from tandem.api.errors import openai_error_response, workers_ai_error_response
from tandem.api.queue.service import NotFound
from tandem.api.responses import json_response
from tandem.errors import InvalidRequest
from tandem.usage.meter import Meter, UsageConfig
from tandem.usage.metrics import UsageMetrics
from tandem.usage.open_store import open_store
from tandem.usage.pricing import TokenUsage
from tandem.usage.store import LedgerRow, UsageStore

USAGE_PATH = "/client/v4/accounts/{account_id}/ai/usage"
ADMIN_USAGE_PATH = "/admin/usage"
DEFAULT_DAYS = 30
MAX_DAYS = 366


class MeterOpening:
    """The app's meter: its store opened on a thread from construction on (as the queue's is),
    installed as `ctx.meter` by `start()` (before the queue's dispatcher starts, so queued work
    is metered from its first job), closed by `stop()` (after the dispatcher stopped)."""

    def __init__(self, ctx: ServerContext, config: UsageConfig, target: str) -> None:
        self.ctx = ctx
        self.config = config
        self.metrics = UsageMetrics(ctx.metrics.registry)
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="usage-open")
        try:
            self._opening: Future[UsageStore] = pool.submit(open_store, target)
        finally:
            pool.shutdown(wait=False)

    async def start(self) -> None:
        store = await asyncio.wrap_future(self._opening)
        self.ctx.meter = Meter(store, self.config.limits, self.config.prices, self.metrics,
                               ledger=self.config.ledger)

    async def stop(self) -> None:
        meter, self.ctx.meter = self.ctx.meter, None
        store = meter.store if meter is not None else await asyncio.wrap_future(self._opening)
        await store.close()


def _day(request: Request, name: str, default: dt.date) -> dt.date:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    try:
        return dt.date.fromisoformat(raw[:10])
    except ValueError:
        raise InvalidRequest(f"{name} must be a date, YYYY-MM-DD, not {raw!r}", param=name) from None


def day_range(request: Request) -> tuple[str, str]:
    until = _day(request, "until", dt.datetime.now(dt.timezone.utc).date())
    since = _day(request, "since", until - dt.timedelta(days=DEFAULT_DAYS - 1))
    if since > until:
        raise InvalidRequest(f"since ({since}) is after until ({until})", param="since")
    if (until - since).days + 1 > MAX_DAYS:
        raise InvalidRequest(f"at most {MAX_DAYS} days at once", param="since")
    return since.isoformat(), until.isoformat()


def _row(meter: Meter, r: LedgerRow, with_account: bool) -> dict:
    u = r.usage
    out = {"account": r.account} if with_account else {}
    out.update({"day": r.day, "model": r.model, "requests": r.requests,
                "input_uncached_tokens": u.input_uncached, "input_cached_tokens": u.input_cached,
                "output_tokens": u.output, "cost_usd": meter.cost(r.model, u)})
    return out


def _totals(meter: Meter, rows: list[LedgerRow]) -> dict:
    usage, requests = TokenUsage(), 0
    costs = []
    for r in rows:
        usage, requests = usage + r.usage, requests + r.requests
        costs.append(meter.cost(r.model, r.usage))
    priced = [c for c in costs if c is not None]
    return {"requests": requests, "input_uncached_tokens": usage.input_uncached,
            "input_cached_tokens": usage.input_cached, "output_tokens": usage.output,
            "cost_usd": sum(priced) if priced else None}


def usage_routes(ctx: ServerContext) -> list[Route]:
    def meter() -> Meter:
        if ctx.meter is None:   # only between the app's start and stop
            raise RuntimeError("the usage store is not open")
        return ctx.meter

    async def account_usage(request: Request) -> Response:
        try:
            account = request.path_params["account_id"]
            since, until = day_range(request)
            tenant = owner_of(request.scope)
            if tenant_of(request.scope) is not None and account != tenant:
                raise NotFound(f"no account {account}")   # the same as an unknown account's
            m = meter()
            rows = await m.ledger(tenant, since, until)
            result = {"account": account, "since": since, "until": until,
                      "usage": [_row(m, r, False) for r in rows], "totals": _totals(m, rows)}
            return json_response({"result": result, "success": True, "errors": [], "messages": []})
        except Exception as exc:
            return workers_ai_error_response(exc)

    async def admin_usage(request: Request) -> Response:
        try:
            account = request.query_params.get("account")
            since, until = day_range(request)
            m = meter()
            rows = await m.ledger(account, since, until)
            return json_response({"object": "usage", "account": account, "since": since,
                                  "until": until, "data": [_row(m, r, True) for r in rows],
                                  "totals": _totals(m, rows)})
        except Exception as exc:
            return openai_error_response(exc)

    return [Route(USAGE_PATH, account_usage, methods=["GET"]),
            Route(ADMIN_USAGE_PATH, admin_usage, methods=["GET"])]
