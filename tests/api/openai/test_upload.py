"""A /v1/files upload read as it streams in: the size limit stops the read once passed (the rest
of the body is never received), and malformed multipart bodies are 400s naming `file`."""

from __future__ import annotations

import asyncio

import pytest
from starlette.requests import Request

from tandem.api.errors import BodyTooLarge
from tandem.api.openai.upload import FORM_ROOM, read_upload
from tandem.errors import InvalidRequest

BOUNDARY = "b0undary"
CHUNK = 4096


def multipart(content: bytes, purpose: bytes = b"batch") -> bytes:
    return (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n".encode() + purpose
            + f"\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; "
              f"filename=\"in.jsonl\"\r\n\r\n".encode() + content + f"\r\n--{BOUNDARY}--\r\n".encode())


def request(body: bytes, content_type: str = f"multipart/form-data; boundary={BOUNDARY}",
            content_length: bool = True) -> tuple[Request, list[int]]:
    """A request whose body arrives in CHUNK-byte messages; the list counts those received."""
    chunks = [body[i:i + CHUNK] for i in range(0, len(body), CHUNK)] or [b""]
    received = [0]

    async def receive():
        i = received[0]
        received[0] += 1
        return {"type": "http.request", "body": chunks[i], "more_body": i + 1 < len(chunks)}

    headers = [(b"content-type", content_type.encode())]
    if content_length:
        headers.append((b"content-length", str(len(body)).encode()))
    return Request({"type": "http", "method": "POST", "path": "/v1/files", "headers": headers}, receive), received


def read(req: Request, max_bytes: int):
    return asyncio.run(read_upload(req, max_bytes))


def test_an_upload_within_the_limit():
    content = b'{"custom_id": "a"}\n' * 100
    up = read(request(multipart(content))[0], len(content))
    assert (up.purpose, up.filename, up.content) == ("batch", "in.jsonl", content)


def test_a_file_one_byte_over_the_limit_is_413():
    content = b"x" * 5000
    with pytest.raises(BodyTooLarge) as exc:
        read(request(multipart(content))[0], 4999)
    assert exc.value.status == 413 and exc.value.param == "file" and "4999 bytes" in exc.value.message


def test_an_oversized_body_stops_being_read_once_past_the_limit():
    """Chunked (no Content-Length): the limit is enforced on the bytes as they arrive."""
    max_bytes = 10 * CHUNK
    body = multipart(b"x" * (100 * CHUNK))
    req, received = request(body, content_length=False)
    with pytest.raises(BodyTooLarge):
        read(req, max_bytes)
    assert received[0] <= (max_bytes + FORM_ROOM) // CHUNK + 2 < len(body) // CHUNK


def test_a_declared_oversized_body_is_refused_before_reading():
    req, received = request(multipart(b"x" * (100 * CHUNK)))
    with pytest.raises(BodyTooLarge):
        read(req, CHUNK)
    assert received[0] == 0


@pytest.mark.parametrize("content_type, body", [
    ("multipart/form-data", multipart(b"x")),                        # no boundary
    ("multipart/form-data; boundary=", b"--\r\n"),                   # an empty one
    (f"multipart/form-data; boundary={BOUNDARY}", b"garbage"),
    (f"multipart/form-data; boundary={BOUNDARY}",                    # a part without a name
     f"--{BOUNDARY}\r\nContent-Type: text/plain\r\n\r\nx\r\n--{BOUNDARY}--\r\n".encode()),
    (f"multipart/form-data; boundary={BOUNDARY}",                    # two files
     multipart(b"x")[:-len(f"--{BOUNDARY}--\r\n")] + multipart(b"y").split(b"\r\n", 4)[4]),
    (f"multipart/form-data; boundary={BOUNDARY}", multipart(b"x", purpose=b"p" * 5000)),
    (f"multipart/form-data; boundary={BOUNDARY}", b""),              # no file field
    ("application/json", b'{"purpose": "batch"}'),
    ("application/x-www-form-urlencoded", b"purpose=batch&file=x"),
    ("", b""),
])
def test_malformed_uploads_are_400_naming_file(content_type, body):
    with pytest.raises(InvalidRequest) as exc:
        read(request(body, content_type)[0], 1000)
    assert exc.value.param == "file" and exc.value.status == 400
