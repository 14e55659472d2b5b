"""Reading a /v1/files upload: a multipart/form-data body with the fields `file` and `purpose`,
bounded in size while it streams in.

The body is counted as it arrives: once it exceeds the file limit plus room for the form's other
fields and headers, the upload stops with a 413, so an oversized file is never read whole (nor
spooled to disk). A body that is not well-formed multipart is a 400 naming `file`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request

from tandem.api.errors import BodyTooLarge
from tandem.errors import InvalidRequest

FORM_ROOM = 64 * 1024   # the body's bytes besides the file's: boundaries, part headers, purpose
_FIELD_BYTES = 1024     # a field other than the file (purpose)


@dataclass(frozen=True)
class Upload:
    purpose: str | None
    filename: str
    content: bytes


def too_large(max_bytes: int) -> BodyTooLarge:
    return BodyTooLarge(f"the file exceeds the limit of {max_bytes} bytes (--max-file-bytes)",
                        param="file")


async def _bounded(request: Request, max_body: int, max_bytes: int) -> AsyncIterator[bytes]:
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_body:
            raise too_large(max_bytes)
        yield chunk


async def read_upload(request: Request, max_bytes: int) -> Upload:
    """The upload's purpose, file name and content (at most `max_bytes`); BodyTooLarge (413) or
    InvalidRequest (400, param file) otherwise."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "multipart/form-data":
        raise InvalidRequest("send the file as multipart/form-data with the fields 'file' and "
                             "'purpose'", param="file")
    max_body = max_bytes + FORM_ROOM
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_body:
        raise too_large(max_bytes)
    parser = MultiPartParser(request.headers, _bounded(request, max_body, max_bytes), max_files=1,
                             max_fields=8, max_part_size=_FIELD_BYTES)
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise InvalidRequest(f"the multipart body is malformed: {exc.message}", param="file") from None
    try:
        purpose, upload = form.get("purpose"), form.get("file")
        if not isinstance(upload, UploadFile):
            raise InvalidRequest("send the file as the multipart field 'file'", param="file")
        content = await upload.read(max_bytes + 1)
        if len(content) > max_bytes:
            raise too_large(max_bytes)
        return Upload(purpose if isinstance(purpose, str) else None,
                      upload.filename or "upload.jsonl", content)
    finally:
        await form.close()
