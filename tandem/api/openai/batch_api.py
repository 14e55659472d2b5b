"""OpenAI's Batch API over the queue: /v1/batches (create, retrieve, list, cancel).

An input file (uploaded with /v1/files, purpose "batch") holds one request per line:
{"custom_id", "method": "POST", "url": "/v1/chat/completions" | "/v1/completions", "body"}.
Creating a batch checks every line, then queues one job per line. While jobs remain the batch
is "in_progress"; once every job has ended it is "completed" (or "cancelled" after a cancel),
with an output file (one line per success: {"id", "custom_id", "response": {"status_code",
"request_id", "body"}, "error": null}) and an error file for the requests that failed. Those
two files are rendered from the jobs when read (files_api.py), ids `file-<batch>-output` and
`file-<batch>-errors`. The account is the API key's tenant ("default" without keys), and the
batch belongs to that tenant (tandem.api.auth.owner_of): another tenant's batch id, for retrieve
and cancel alike, answers 404 like an unknown one; the list holds the caller's own.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tandem.api.auth import owner_of, tenant_of
from tandem.api.context import ServerContext
from tandem.api.errors import openai_error_response
from tandem.api.openai.openai_api import name_grammar_param
from tandem.api.openai.openai_format import OpenAIFormatter, make_id
from tandem.api.openai.openai_protocol import parse_chat, parse_completion
from tandem.api.queue.service import (
    JobProgress,
    NotFound,
    QueueConfig,
    QueueService,
    idempotency_key,
    run_job,
)
from tandem.api.request_body import parse_off_loop, read_json_object
from tandem.api.responses import json_response
from tandem.asyncq.job import JSON, Batch, BatchSpec, Job, JobSpec, JobStatus
from tandem.errors import InvalidRequest, TandemError
from tandem.types import RequestContext

ENDPOINTS = {"/v1/chat/completions": parse_chat, "/v1/completions": parse_completion}
OUTPUT, ERRORS = "-output", "-errors"
MAX_BATCH_REQUESTS = 50_000   # lines of one input file (OpenAI's limit)


def account_of(request: Request) -> str:
    return tenant_of(request.scope) or "default"


def batch_file_id(batch_id: str, kind: str) -> str:
    return f"file-{batch_id}{kind}"


def batch_object(b: Batch, finished_at: float | None = None) -> JSON:
    meta = b.meta
    done = b.done
    status = ("cancelled" if b.cancelled else "completed") if done else "in_progress"
    end = int(finished_at) if done and finished_at is not None else None
    return {
        "id": b.id, "object": "batch", "endpoint": meta.get("endpoint"), "errors": None,
        "input_file_id": meta.get("input_file_id"), "completion_window": meta.get("completion_window"),
        "status": status,
        "output_file_id": batch_file_id(b.id, OUTPUT) if done and b.succeeded else None,
        "error_file_id": batch_file_id(b.id, ERRORS) if done and b.failed else None,
        "created_at": int(b.created_at), "in_progress_at": int(b.created_at),
        "expires_at": None, "finalizing_at": end if status == "completed" else None,
        "completed_at": end if status == "completed" else None, "failed_at": None,
        "expired_at": None, "cancelling_at": end if status == "cancelled" else None,
        "cancelled_at": end if status == "cancelled" else None,
        "request_counts": {"total": b.total, "completed": b.succeeded, "failed": b.failed},
        "metadata": meta.get("metadata"), "model": b.model,
    }


def output_lines(jobs: list[Job], errors: bool) -> str:
    """The batch's output file (errors=False) or error file (errors=True), JSONL."""
    lines = []
    for job in jobs:
        ok = job.status is JobStatus.SUCCEEDED
        if job.status is JobStatus.CANCELLED or ok == errors:
            continue
        line: JSON = {"id": f"batch_req_{job.id}", "custom_id": job.external_reference,
                      "response": None, "error": None}
        if ok:
            line["response"] = {"status_code": 200, "request_id": job.id, "body": job.result}
        elif (job.error or {}).get("status"):
            err = {k: job.error.get(k) for k in ("message", "type", "param", "code")}
            line["response"] = {"status_code": job.error["status"], "request_id": job.id,
                                "body": {"error": err}}
        else:
            line["error"] = {"code": (job.error or {}).get("type", "internal_error"),
                             "message": (job.error or {}).get("message", "the request failed")}
        lines.append(orjson.dumps(line).decode())
    return "".join(line + "\n" for line in lines)


def _read_input(content: str, endpoint: str) -> list[JSON]:
    requests, seen = [], set()
    for n, raw in enumerate(content.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise InvalidRequest(f"input file line {n} is not JSON", param="input_file_id") from None
        if not isinstance(line, dict) or not isinstance(line.get("body"), dict):
            raise InvalidRequest(f"input file line {n} needs a 'body' object", param="input_file_id")
        if line.get("url") != endpoint or line.get("method", "POST") != "POST":
            raise InvalidRequest(f"input file line {n}: url must be {endpoint} with method POST "
                                 "(the batch's endpoint)", param="input_file_id")
        custom_id = line.get("custom_id")
        if not isinstance(custom_id, str) or custom_id in seen:
            raise InvalidRequest(f"input file line {n}: custom_id must be a string unique in the "
                                 "file", param="input_file_id")
        seen.add(custom_id)
        requests.append(line)
        if len(requests) > MAX_BATCH_REQUESTS:
            raise InvalidRequest(f"the input file holds more than {MAX_BATCH_REQUESTS} requests, "
                                 "the limit of one batch", param="input_file_id")
    if not requests:
        raise InvalidRequest("the input file holds no request", param="input_file_id")
    return requests


def _check_create(body: JSON) -> None:
    """POST /v1/batches's fields, checked as OpenAI does (metadata: at most 16 string pairs,
    keys up to 64 characters, values up to 512)."""
    endpoint = body.get("endpoint")
    if not isinstance(endpoint, str) or endpoint not in ENDPOINTS:
        raise InvalidRequest(f"endpoint must be one of {', '.join(ENDPOINTS)}", param="endpoint")
    if body.get("completion_window", "24h") != "24h":
        raise InvalidRequest("completion_window must be 24h", param="completion_window")
    if not isinstance(body.get("input_file_id"), str):
        raise InvalidRequest("input_file_id must be a file id (a string)", param="input_file_id")
    metadata = body.get("metadata")
    if metadata is not None and not (
            isinstance(metadata, dict) and len(metadata) <= 16
            and all(isinstance(v, str) and len(k) <= 64 and len(v) <= 512 for k, v in metadata.items())):
        raise InvalidRequest("metadata must be an object of at most 16 string values (keys up to 64 "
                             "characters, values up to 512)", param="metadata")


def _list_limit(raw: str | None) -> int:
    """GET /v1/batches?limit=N: 1 to 100, default 20 (as OpenAI's)."""
    if raw in (None, ""):
        return 20
    try:
        limit = int(raw)
    except ValueError:
        raise InvalidRequest(f"limit must be an integer from 1 to 100, not {raw!r}", param="limit") from None
    if not 1 <= limit <= 100:
        raise InvalidRequest(f"limit must be from 1 to 100, not {limit}", param="limit")
    return limit


async def run_openai_job(ctx: ServerContext, job: Job, config: QueueConfig,
                         progress: JobProgress) -> JSON:
    """One batch line through the app's backend -> the response body the endpoint would send.
    It runs at the queue's background priority, lowered further by the line's own vLLM
    `priority` when positive (OpenAI's Batch API has no priority field of its own); a run
    after a preemption continues the tokens the earlier ones produced."""
    body = job.body["request"]
    parse = ENDPOINTS[job.body["url"]]
    parsed = await parse_off_loop(parse, body, ctx.parse_context(), len(str(body)))
    parsed = replace(parsed, stream=False, include_usage=False, continuous_usage=False)
    rid = make_id("chatcmpl" if parsed.kind == "chat" else "cmpl")
    context = RequestContext(tenant=job.body.get("tenant"), cache_salt=parsed.cache_salt,
                             priority=config.engine_priority(parsed.priority),
                             parser=parsed.parser_options,
                             share_prefix_cache=ctx.config.share_prefix_cache)
    try:
        outputs = await run_job(ctx, job, parsed.engine_requests(rid, context), progress,
                              parsed.n)
    except TandemError as exc:
        raise name_grammar_param(exc, parsed.grammar_param)
    fmt = OpenAIFormatter(parsed, rid, ctx.fingerprint, ctx.token_texts)
    for i, d in outputs.deltas():
        fmt.add(i, d)
    return fmt.response()


def batch_routes(service: QueueService) -> list[Route]:
    async def owned(request: Request) -> Batch:
        b = await service.queue.get_batch(request.path_params["batch_id"], owner_of(request.scope))
        if b is None or b.account != account_of(request) or b.meta.get("object") != "batch":
            raise NotFound(f"No batch found with id '{request.path_params['batch_id']}'",
                           param="batch_id")
        return b

    async def view(b: Batch) -> JSON:
        finished = None
        if b.done:
            jobs = await service.queue.list_batch(b.id, b.tenant)
            finished = max((j.finished_at or 0 for j in jobs), default=None)
        return batch_object(b, finished)

    async def create(request: Request) -> Response:
        try:
            body = await read_json_object(request, 65536)
            _check_create(body)
            endpoint = body["endpoint"]
            account, owner = account_of(request), owner_of(request.scope)
            f = await service.queue.get_file(body["input_file_id"], owner, with_content=True)
            if f is None or f.account != account:
                raise NotFound(f"No file found with id '{body.get('input_file_id')}'",
                               param="input_file_id")
            # a file of up to QueueConfig.max_file_bytes: parsed off the event loop
            lines = await asyncio.to_thread(_read_input, f.content, endpoint)
            tenant = tenant_of(request.scope)
            jobs = tuple(JobSpec({"api": "openai", "url": endpoint, "tenant": tenant,
                                  "request": line["body"]}, external_reference=line["custom_id"])
                         for line in lines)
            meta = {"object": "batch", "endpoint": endpoint, "input_file_id": f.id,
                    "completion_window": "24h", "metadata": body.get("metadata")}
            batch, _ = await service.enqueue(BatchSpec(
                account=account, model=str(lines[0]["body"].get("model", service.ctx.served_name)),
                jobs=jobs, key=idempotency_key(request.headers),
                max_attempts=service.config.max_attempts, meta=meta, tenant=owner))
            return json_response(await view(batch))
        except Exception as exc:
            return openai_error_response(exc)

    async def retrieve(request: Request) -> Response:
        try:
            return json_response(await view(await owned(request)))
        except Exception as exc:
            return openai_error_response(exc)

    async def cancel(request: Request) -> Response:
        try:
            b = await owned(request)
            await service.queue.cancel(b.id, b.tenant)
            return json_response(await view(await service.queue.get_batch(b.id, b.tenant)))
        except Exception as exc:
            return openai_error_response(exc)

    async def listing(request: Request) -> Response:
        try:
            limit = _list_limit(request.query_params.get("limit"))
        except InvalidRequest as exc:
            return openai_error_response(exc)
        owned_batches = await service.queue.list_batches(account_of(request), owner_of(request.scope))
        batches = [b for b in owned_batches if b.meta.get("object") == "batch"]
        after = request.query_params.get("after")
        if after:
            ids = [b.id for b in batches]
            batches = batches[ids.index(after) + 1:] if after in ids else []
        page = [await view(b) for b in batches[:limit]]
        return json_response({"object": "list", "data": page, "has_more": len(batches) > limit,
                              "first_id": page[0]["id"] if page else None,
                              "last_id": page[-1]["id"] if page else None})

    return [Route("/v1/batches", create, methods=["POST"]),
            Route("/v1/batches", listing, methods=["GET"]),
            Route("/v1/batches/{batch_id}", retrieve, methods=["GET"]),
            Route("/v1/batches/{batch_id}/cancel", cancel, methods=["POST"])]
