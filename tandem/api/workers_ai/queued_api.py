"""Workers AI's asynchronous batch API, on the run route with `?queueRequest=true`.

  POST /client/v4/accounts/{account_id}/ai/run/{model}?queueRequest=true
    {"requests": [{...a run body..., "external_reference": ...}, ...]}
      -> {"result": {"status": "queued", "request_id", "model"}, "success": true, ...}
    {"request_id": "..."}
      -> {"result": {"status": "queued" | "running", "request_id", "model"}, ...} until every
         request has ended, then {"result": {"responses": [{"id", "result", "success",
         "external_reference"}], "usage": {...}}, ...}; `id` is the request's index.
Each `result` is what the synchronous route answers for the same body (workers_ai_output.py:
parsed tool calls and reasoning included). A body over QueueConfig.max_payload_bytes (10 MB)
is a 413 in Workers AI's envelope. The
request list and the model are checked when queued; each request is parsed when it runs, and
one that is invalid ends with "success": false and its error. An `Idempotency-Key` header
makes the enqueue idempotent. The account is the path's account_id; the queued request belongs
to the caller's tenant too (tandem.api.auth.owner_of): polling another tenant's request_id, in
any account, answers 404 like an unknown one.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from tandem.api.auth import owner_of, tenant_of
from tandem.api.context import ServerContext
from tandem.api.openai.openai_api import name_grammar_param
from tandem.api.openai.openai_format import make_id
from tandem.api.queue.service import (
    JobProgress,
    NotFound,
    QueueConfig,
    QueueService,
    idempotency_key,
    run_job,
)
from tandem.api.request_body import parse_off_loop, read_json_body
from tandem.api.responses import json_response
from tandem.api.workers_ai.workers_ai_api import model_matches, parse_workers_ai
from tandem.api.workers_ai.workers_ai_output import WorkersAIResult
from tandem.asyncq.job import JSON, Batch, BatchSpec, Job, JobSpec, JobStatus
from tandem.errors import InvalidRequest, ModelNotFound, TandemError
from tandem.types import RequestContext

MAX_REQUESTS = 100_000


def _envelope(result: JSON) -> JSON:
    return {"result": result, "success": True, "errors": [], "messages": []}


async def queued_request(service: QueueService, request: Request) -> Response:
    """The route's `queueRequest=true` branch; errors are raised for the route's envelope."""
    ctx = service.ctx
    account, model = request.path_params["account_id"], request.path_params["model"]
    body, _ = await read_json_body(request, service.config.max_payload_bytes)
    if "request_id" in body:
        return json_response(_envelope(await _poll(service, account, owner_of(request.scope),
                                                   body["request_id"])))
    if not model_matches(model, ctx.served_name):
        raise ModelNotFound(f"No such model {model}; this server serves {ctx.served_name}",
                            param="model")
    requests = body.get("requests")
    if not isinstance(requests, list) or not requests or len(requests) > MAX_REQUESTS or \
            not all(isinstance(r, dict) for r in requests):
        raise InvalidRequest(f"'requests' must be a list of 1 to {MAX_REQUESTS} request objects, "
                             "or poll with {\"request_id\": ...}", param="requests")
    tenant = tenant_of(request.scope)
    jobs = tuple(JobSpec(body={"api": "workers_ai", "model": model, "tenant": tenant,
                               "request": {k: v for k, v in r.items() if k != "external_reference"}},
                         external_reference=_reference(r.get("external_reference")))
                 for r in requests)
    batch, _ = await service.enqueue(BatchSpec(
        account=account, model=model, jobs=jobs, key=idempotency_key(request.headers),
        max_attempts=service.config.max_attempts, tenant=owner_of(request.scope)))
    return json_response(_envelope({"status": "queued", "request_id": batch.id, "model": model}))


def _reference(value) -> str | None:
    return None if value is None else str(value)


async def _poll(service: QueueService, account: str, tenant: str, request_id) -> JSON:
    batch = await service.queue.get_batch(str(request_id), tenant)
    if batch is None or batch.account != account:
        raise NotFound(f"no queued request {request_id} for account {account}", param="request_id")
    jobs = await service.queue.list_batch(batch.id, tenant)
    if not batch.done:
        # running from the moment a job is leased (the batch's counters move only as jobs end)
        started = any(j.status is not JobStatus.QUEUED for j in jobs)
        return {"status": "running" if started else "queued", "request_id": batch.id, "model": batch.model}
    return responses(batch, jobs)


def responses(batch: Batch, jobs: list[Job]) -> JSON:
    out, prompt, completion = [], 0, 0
    for job in jobs:
        entry: JSON = {"id": job.index, "result": job.result,
                       "success": job.status is JobStatus.SUCCEEDED,
                       "external_reference": job.external_reference}
        if job.status is not JobStatus.SUCCEEDED:
            entry["error"] = (job.error or {}).get("message", job.status.value)
        usage = (job.result or {}).get("usage") or {}
        prompt += usage.get("prompt_tokens", 0)
        completion += usage.get("completion_tokens", 0)
        out.append(entry)
    return {"responses": out, "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                        "total_tokens": prompt + completion}}


async def run_workers_ai_job(ctx: ServerContext, job: Job, config: QueueConfig,
                             progress: JobProgress) -> JSON:
    """One queued request through the app's backend -> its `result`, as the synchronous route
    answers the same body ({"response", "usage"}, + "tool_calls" and "reasoning_content" through
    the output parsers). It runs at the queue's background priority (Workers AI's API has no
    priority field); a run after a preemption continues the tokens the earlier ones produced."""
    body, model = job.body["request"], job.body["model"]
    parsed = await parse_off_loop(lambda b, c: parse_workers_ai(b, model, c), body,
                                  ctx.parse_context(), len(str(body)))
    context = RequestContext(tenant=job.body.get("tenant"), priority=config.engine_priority(),
                             parser=parsed.parser_options,
                             share_prefix_cache=ctx.config.share_prefix_cache)
    rid = make_id("wai")
    reqs = parsed.engine_requests(rid, context)
    try:
        outputs = await run_job(ctx, job, reqs, progress)
    except TandemError as exc:
        raise name_grammar_param(exc, parsed.grammar_param)
    result = WorkersAIResult(parsed.output, rid, len(reqs[0].prompt_token_ids))
    for _, d in outputs.deltas():
        result.add(d)
    return result.result()
