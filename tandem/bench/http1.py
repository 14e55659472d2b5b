"""ConnectionPool: keep-alive POSTs to one base URL, over tandem.http.client.

The interface benchmarks/disagg/gateway_overhead.py uses (`post` -> Response with
`next_chunk`, `read`, `release`); tandem.bench.client uses tandem.http.client directly.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from tandem.http.client import ClientConfig, HTTPClient, Response


class ConnectionPool:
    def __init__(self, base_url: str, connect_timeout_s: float = 30.0,
                 read_timeout_s: float = 600.0) -> None:
        if urlsplit(base_url).scheme not in ("http", "https"):
            raise ValueError(f"unsupported URL scheme in {base_url!r}")
        self.base_url = base_url
        self._read_timeout = read_timeout_s
        self._http = HTTPClient(ClientConfig(connect_timeout_s=connect_timeout_s,
                                             max_idle_per_origin=1 << 30))

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> Response:
        """Send a POST (Content-Type: application/json, whatever `headers` say) and read the
        status line and headers; the caller must `release()`. Raises tandem.http.client's
        HTTPFailure subclasses."""
        extra = {k: v for k, v in headers.items() if k.lower() != "content-type"}
        return await self._http.request("POST", self.base_url, path, body, self._read_timeout, extra)

    async def aclose(self) -> None:
        await self._http.aclose()
