"""Turning errors into the two error envelopes the HTTP layer speaks.

OpenAI routes (and the internal API): {"error": {"message", "type", "param", "code"}}.
Workers AI routes: {"result": null, "success": false, "errors": [{"code", "message"}], "messages": []}.
Anthropic's Messages routes: {"type": "error", "error": {"type", "message"}}.
"""

from __future__ import annotations

import logging

from starlette.responses import Response

from tandem.api.responses import json_response
from tandem.errors import (
    CapacityExceeded,
    Forbidden,
    InvalidRequest,
    ModelNotFound,
    NoHealthyWorker,
    PromptTooLong,
    RateLimited,
    TandemError,
    Unauthorized,
)

log = logging.getLogger(__name__)


class BodyTooLarge(TandemError):
    """The request body exceeds ServerConfig.max_body_bytes (413)."""

    status = 413
    code = "request_too_large"


class BackendFailure(TandemError):
    """The engine failed a request for a reason the caller cannot fix (500)."""

    status = 500
    error_type = "server_error"
    code = "internal_error"


def as_tandem_error(exc: BaseException) -> TandemError:
    """A TandemError as is; anything else becomes a 500 whose details stay in the log."""
    if isinstance(exc, TandemError):
        return exc
    log.error("request failed", exc_info=exc)
    return BackendFailure("internal error while generating; see the server log")


def openai_error_body(exc: TandemError) -> dict:
    return {"error": {"message": exc.message, "type": exc.error_type,
                      "param": exc.param, "code": exc.code}}


def openai_error_response(exc: BaseException) -> Response:
    err = as_tandem_error(exc)
    return json_response(openai_error_body(err), status=err.status, headers=err.headers)


# Workers AI's numeric error codes for the failures tandem can report.
_WORKERS_AI_CODES: tuple[tuple[type[TandemError], int], ...] = (
    (Unauthorized, 10000),
    (Forbidden, 10000),          # Cloudflare's 403 "Authentication error" (a token of another account)
    (ModelNotFound, 5007),
    (PromptTooLong, 5021),
    (BodyTooLarge, 5021),
    (RateLimited, 3036),           # "Account limited"
    (CapacityExceeded, 3040),
    (NoHealthyWorker, 3043),
    (BackendFailure, 3043),
    (InvalidRequest, 5006),
)


def workers_ai_error_code(err: TandemError) -> int:
    for cls, code in _WORKERS_AI_CODES:
        if isinstance(err, cls):
            return code
    return 5006 if err.status < 500 else 3043


def workers_ai_error_body(err: TandemError) -> dict:
    message = err.message if err.param is None or err.param in err.message \
        else f"{err.message} (param: {err.param})"
    return {"result": None, "success": False,
            "errors": [{"code": workers_ai_error_code(err), "message": message}], "messages": []}


def workers_ai_error_response(exc: BaseException) -> Response:
    err = as_tandem_error(exc)
    return json_response(workers_ai_error_body(err), status=err.status, headers=err.headers)


# Anthropic's error types by status (its API answers an overloaded service with 529).
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                    500: "api_error", 503: "overloaded_error", 529: "overloaded_error"}


def anthropic_error(exc: BaseException) -> tuple[TandemError, int]:
    """The error and the status Anthropic would answer it with: a prompt that does not fit is a
    400 "prompt is too long" there (harnesses read that text to compact their history)."""
    err = as_tandem_error(exc)
    if isinstance(err, PromptTooLong):
        return PromptTooLong(f"prompt is too long: {err.message}", param=err.param), 400
    return err, err.status


def anthropic_error_body(err: TandemError, status: int | None = None) -> dict:
    """{"type": "error", "error": {"type", "message"}} (the param named in the message)."""
    status = err.status if status is None else status
    kind = _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    message = err.message if err.param is None or err.param in err.message \
        else f"{err.param}: {err.message}"
    return {"type": "error", "error": {"type": kind, "message": message}}


def anthropic_error_response(exc: BaseException) -> Response:
    err, status = anthropic_error(exc)
    return json_response(anthropic_error_body(err, status), status=status, headers=err.headers)


def error_response_for_path(path: str, exc: BaseException) -> Response:
    """The envelope of the API `path` belongs to: Workers AI under /client/, Anthropic's under
    /v1/messages, OpenAI elsewhere."""
    if path.startswith("/client/"):
        return workers_ai_error_response(exc)
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return anthropic_error_response(exc)
    return openai_error_response(exc)
