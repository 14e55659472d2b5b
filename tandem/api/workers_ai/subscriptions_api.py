"""Event subscriptions for queued Workers AI batches: a URL that receives the batch events
(`cf.workersAi.model.batch.queued`, `.succeeded`, `.failed`) as signed POSTs.

  POST   /client/v4/accounts/{account_id}/event_subscriptions/subscriptions
         {"destination": {"url": ...}} (or {"url": ...}), "events": [...] (full or short names,
         e.g. "batch.succeeded"; default all), "secret"? -> the subscription with its secret
         (shown only here; it signs every delivery: x-tandem-signature, tandem.asyncq.signature)
  GET    same path                                  -> the account's subscriptions, no secrets
  DELETE same path + /{subscription_id}             -> {"id"}
  GET    same path + /{subscription_id}/dead_letters -> the events whose delivery to it gave up
         (attempts spent): each with its last error and the body that was posted
Cloudflare delivers these events to a Queue; tandem posts them to the URL (retries with
backoff, then a dead-letter record: tandem.asyncq.notifier). Any http(s) URL is accepted unless
the server names allowed prefixes (`--event-url-allow`): the server then refuses the others
(400), so that API clients cannot make it post to internal addresses. A subscription belongs to
the caller's tenant (tandem.api.auth.owner_of): it receives only that tenant's batches' events,
and another tenant's subscription id answers 404 like an unknown one.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tandem.api.auth import owner_of
from tandem.api.errors import workers_ai_error_response
from tandem.api.queue.service import NotFound, QueueService
from tandem.api.request_body import read_json_object
from tandem.api.responses import json_response
from tandem.asyncq.event import Delivery, EventType, Subscription, SubscriptionSpec, render
from tandem.errors import InvalidRequest

PATH = "/client/v4/accounts/{account_id}/event_subscriptions/subscriptions"
_BY_NAME = {**{t.value: t for t in EventType},
            **{t.value.removeprefix("cf.workersAi.model."): t for t in EventType}}


def _view(sub: Subscription, with_secret: bool) -> dict:
    view = {"id": sub.id, "destination": {"type": "webhook", "url": sub.url},
            "events": [t.value for t in sub.event_types], "created_at": sub.created_at}
    if with_secret:
        view["secret"] = sub.secret
    return view


def _spec(account: str, tenant: str, body: dict, allow: tuple[str, ...] = ()) -> SubscriptionSpec:
    """`allow`: URL prefixes a destination must start with (the server's --event-url-allow);
    empty: any http(s) URL."""
    dest = body.get("destination")
    url = dest.get("url") if isinstance(dest, dict) else body.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise InvalidRequest("give the webhook's http(s) URL as destination.url", param="destination.url")
    if allow and not url.startswith(allow):
        raise InvalidRequest(f"this server posts events only to URLs starting with "
                             f"{' or '.join(allow)}", param="destination.url")
    names = body.get("events", list(_BY_NAME)[:len(EventType)])
    if not isinstance(names, list) or not names or any(n not in _BY_NAME for n in names):
        raise InvalidRequest(f"'events' must list some of {', '.join(t.value for t in EventType)}",
                             param="events")
    secret = body.get("secret")
    if secret is not None and (not isinstance(secret, str) or len(secret) < 16):
        raise InvalidRequest("'secret' must be a string of at least 16 characters", param="secret")
    types = tuple(dict.fromkeys(_BY_NAME[n] for n in names))
    return SubscriptionSpec(account=account, url=url, event_types=types, secret=secret, tenant=tenant)


def subscription_routes(service: QueueService) -> list[Route]:
    def ok(result) -> Response:
        return json_response({"result": result, "success": True, "errors": [], "messages": []})

    async def create(request: Request) -> Response:
        try:
            body = await read_json_object(request, 65536)
            sub = await service.queue.subscribe(_spec(request.path_params["account_id"],
                                                      owner_of(request.scope), body,
                                                      service.config.event_url_allow))
            return ok(_view(sub, with_secret=True))
        except Exception as exc:
            return workers_ai_error_response(exc)

    async def listing(request: Request) -> Response:
        subs = await service.queue.subscriptions(request.path_params["account_id"],
                                                 owner_of(request.scope))
        return ok([_view(s, with_secret=False) for s in subs])

    async def delete(request: Request) -> Response:
        account, sub_id = request.path_params["account_id"], request.path_params["subscription_id"]
        tenant = owner_of(request.scope)
        mine = {s.id for s in await service.queue.subscriptions(account, tenant)}
        if sub_id not in mine or not await service.queue.unsubscribe(sub_id, tenant):
            return workers_ai_error_response(NotFound(f"no subscription {sub_id}"))
        return ok({"id": sub_id})

    async def dead_letters(request: Request) -> Response:
        account, sub_id = request.path_params["account_id"], request.path_params["subscription_id"]
        tenant = owner_of(request.scope)
        if sub_id not in {s.id for s in await service.queue.subscriptions(account, tenant)}:
            return workers_ai_error_response(NotFound(f"no subscription {sub_id}"))
        dead = [d for d in await service.queue.dead_letters(account, tenant)
                if d.subscription_id == sub_id]
        return ok([_dead_view(d) for d in dead])

    return [Route(PATH, create, methods=["POST"]), Route(PATH, listing, methods=["GET"]),
            Route(PATH + "/{subscription_id}", delete, methods=["DELETE"]),
            Route(PATH + "/{subscription_id}/dead_letters", dead_letters, methods=["GET"])]


def _dead_view(d: Delivery) -> dict:
    return {"id": d.id, "subscription_id": d.subscription_id, "url": d.url, "attempts": d.attempts,
            "last_error": d.last_error, "event": render(d.event, d.subscription_id)}
