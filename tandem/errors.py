"""Errors a user can cause, each carrying what the API layer needs to answer it.

The engine and the loaders raise these; the HTTP layers turn them into their own
error envelopes (OpenAI-style JSON, Workers AI envelope) with `status`.
"""

from __future__ import annotations


class TandemError(Exception):
    """Base class: a problem the caller can fix, with an HTTP status to report it."""

    status: int = 400
    error_type: str = "invalid_request_error"
    code: str | None = None
    headers: dict[str, str] | None = None   # response headers the answer carries (Retry-After...)

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class InvalidRequest(TandemError):
    """A parameter has the wrong type or an out-of-range value (400)."""


class ChatTemplateError(InvalidRequest):
    """The template rejected the conversation (raise_exception), failed to render, or does not
    parse (400, param messages)."""

    def __init__(self, message: str, param: str | None = "messages") -> None:
        super().__init__(message, param)


class PromptTooLong(TandemError):
    """The prompt cannot fit the model's context or the whole KV cache: a 400 with code
    context_length_exceeded, as OpenAI and vLLM answer (clients such as LangChain recognize a context
    overflow by that status and code). A body too large in bytes is another error (413)."""

    code = "context_length_exceeded"


class ModelNotFound(TandemError):
    """The request names a model this server does not serve (404)."""

    status = 404
    code = "model_not_found"  # type invalid_request_error, as OpenAI


class CapacityExceeded(TandemError):
    """Every worker is saturated; try again later (429)."""

    status = 429
    error_type = "rate_limit_error"
    code = "capacity_exceeded"


class TenantQueueFull(CapacityExceeded):
    """Every worker is at capacity and the caller's queue at the gateway is full (429, code
    rate_limit_exceeded as OpenAI's); Retry-After estimates when its queue will have drained
    (tandem/gateway/admission/)."""

    code = "rate_limit_exceeded"

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.headers = {"retry-after": str(retry_after_s)}


class QueueTimeout(CapacityExceeded):
    """The request waited at the gateway longer than its bound with every worker at capacity
    (503, code queue_timeout)."""

    status = 503
    error_type = "service_unavailable"
    code = "queue_timeout"

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.headers = {"retry-after": str(retry_after_s)}


class RateLimited(TandemError):
    """The caller's rate limit (requests or tokens per minute) is spent (429, code
    rate_limit_exceeded; type "requests" or "tokens" as OpenAI's); `headers` carry Retry-After
    and the x-ratelimit-* values (tandem/usage/meter.py)."""

    status = 429
    code = "rate_limit_exceeded"

    def __init__(self, message: str, error_type: str, headers: dict[str, str],
                 retry_after_s: float) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.headers = headers
        self.retry_after_s = retry_after_s   # when the request would fit (queued work waits this)


class NoHealthyWorker(TandemError):
    """No worker can serve the request right now (503)."""

    status = 503
    error_type = "service_unavailable"
    code = "no_healthy_worker"


class RegistrationRefused(TandemError):
    """The gateway refuses a worker's registration (400, param url): its advertised address is
    loopback on a gateway serving several hosts (`advertised_loopback`), or the gateway cannot
    reach it (`worker_unreachable`). tandem/gateway/registration_check.py."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message, param="url")
        self.code = code


class Unauthorized(TandemError):
    status = 401
    code = "invalid_api_key"  # type invalid_request_error, as OpenAI


class Forbidden(TandemError):
    """The caller authenticated, but its credential does not open this route (a tenant's key on
    an /internal route)."""

    status = 403
    error_type = "permission_error"
    code = "permission_denied"


class ModelLoadError(Exception):
    """A checkpoint cannot be loaded: missing file, unsupported architecture, bad shapes."""


class KVLayoutMismatch(Exception):
    """Two workers disagree on the KV layout (model, dtype, block size, heads, layers)."""


class NotSupportedYet(InvalidRequest):
    """A valid OpenAI / Workers AI parameter that tandem does not implement yet (400)."""

    code = "not_supported"

    def __init__(self, param: str, what: str | None = None) -> None:
        super().__init__(f"'{param}'{' ' + what if what else ''} is not supported yet", param=param)
