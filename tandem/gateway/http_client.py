"""Where the gateway's modules import their HTTP client from; it is tandem.http.client."""

from tandem.http.client import (
    ClientConfig,
    ConnectFailed,
    ConnectionBroken,
    HTTPClient,
    HTTPFailure,
    Response,
    ResponseTimeout,
)

__all__ = ["ClientConfig", "ConnectFailed", "ConnectionBroken", "HTTPClient", "HTTPFailure",
           "Response", "ResponseTimeout"]
