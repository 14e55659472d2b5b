"""OpenAI's Files API, as far as batches need it: /v1/files (upload, list), /v1/files/{id}
(retrieve, delete) and /v1/files/{id}/content (download).

Uploads are multipart (`file`, `purpose`), UTF-8 text (JSONL), at most
QueueConfig.max_file_bytes (`--max-file-bytes`, 100 MiB; 413 beyond, read as it streams in:
upload.py), kept in the queue's store so that every gateway sharing it can read them. A batch's output and error files are not stored:
they are rendered from its jobs when read (batch_api.output_lines), and exist once the batch
has ended. Files belong to the tenant that uploaded them (a batch's output files to the batch's):
another tenant's file id answers 404 like an unknown one, and listings hold the caller's own.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tandem.api.auth import owner_of
from tandem.api.errors import openai_error_response
from tandem.api.openai.batch_api import ERRORS, OUTPUT, account_of, batch_file_id, output_lines
from tandem.api.openai.upload import read_upload
from tandem.api.queue.service import NotFound, QueueService
from tandem.api.responses import json_response
from tandem.asyncq.job import JSON, StoredFile
from tandem.errors import InvalidRequest

PURPOSES = ("batch", "user_data", "fine-tune", "assistants", "vision", "evals")


def file_object(f: StoredFile) -> JSON:
    return {"id": f.id, "object": "file", "bytes": f.bytes, "created_at": int(f.created_at),
            "filename": f.filename, "purpose": f.purpose, "status": "processed",
            "expires_at": None, "status_details": None}


def file_routes(service: QueueService) -> list[Route]:
    max_bytes = service.config.max_file_bytes

    async def rendered(file_id: str, account: str, tenant: str) -> StoredFile | None:
        """A batch's output or error file, rendered now; None if `file_id` names none of the
        tenant's."""
        for kind in (OUTPUT, ERRORS):
            batch_id = file_id.removeprefix("file-").removesuffix(kind)
            if file_id.endswith(kind) and file_id.startswith("file-"):
                b = await service.queue.get_batch(batch_id, tenant)
                if b is None or b.account != account or not b.done or b.meta.get("object") != "batch":
                    return None
                if batch_file_id(b.id, kind) != file_id:
                    return None
                content = output_lines(await service.queue.list_batch(b.id, tenant),
                                       errors=kind == ERRORS)
                return StoredFile(id=file_id, account=account, purpose="batch_output",
                                  filename=f"batch_{b.id}{kind}.jsonl",
                                  bytes=len(content.encode()), created_at=b.created_at,
                                  content=content, tenant=tenant)
        return None

    async def find(request: Request, with_content: bool) -> StoredFile:
        file_id, account = request.path_params["file_id"], account_of(request)
        tenant = owner_of(request.scope)
        f = await service.queue.get_file(file_id, tenant, with_content=with_content)
        if f is None or f.account != account:
            f = await rendered(file_id, account, tenant)
        if f is None:
            raise NotFound(f"No such File object: {file_id}", param="id")
        return f

    async def upload(request: Request) -> Response:
        try:
            up = await read_upload(request, max_bytes)
            if up.purpose not in PURPOSES:
                raise InvalidRequest(f"purpose must be one of {', '.join(PURPOSES)}", param="purpose")
            try:
                text = up.content.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidRequest("the file must be UTF-8 text (JSONL)", param="file") from None
            f = await service.queue.put_file(account_of(request), up.purpose, up.filename, text,
                                             owner_of(request.scope))
            return json_response(file_object(f))
        except Exception as exc:
            return openai_error_response(exc)

    async def listing(request: Request) -> Response:
        files = await service.queue.list_files(account_of(request), owner_of(request.scope))
        purpose = request.query_params.get("purpose")
        data = [file_object(f) for f in files if purpose in (None, f.purpose)]
        return json_response({"object": "list", "data": data, "has_more": False,
                              "first_id": data[0]["id"] if data else None,
                              "last_id": data[-1]["id"] if data else None})

    async def retrieve(request: Request) -> Response:
        try:
            return json_response(file_object(await find(request, with_content=False)))
        except Exception as exc:
            return openai_error_response(exc)

    async def content(request: Request) -> Response:
        try:
            f = await find(request, with_content=True)
            return Response(f.content.encode(), media_type="application/jsonl")
        except Exception as exc:
            return openai_error_response(exc)

    async def delete(request: Request) -> Response:
        try:
            f = await find(request, with_content=False)
            if not await service.queue.delete_file(f.id, owner_of(request.scope)):
                raise InvalidRequest("a batch's output and error files go with the batch",
                                     param="file_id")
            return json_response({"id": f.id, "object": "file", "deleted": True})
        except Exception as exc:
            return openai_error_response(exc)

    return [Route("/v1/files", upload, methods=["POST"]),
            Route("/v1/files", listing, methods=["GET"]),
            Route("/v1/files/{file_id}", retrieve, methods=["GET"]),
            Route("/v1/files/{file_id}", delete, methods=["DELETE"]),
            Route("/v1/files/{file_id}/content", content, methods=["GET"])]
