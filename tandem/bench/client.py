"""Streaming OpenAI client that times every chunk of a response.

Requests go over the keep-alive HTTP/1.1 client the gateway also uses (tandem.http.client, cheap
per chunk). The SSE stream is parsed from raw bytes with orjson; a chunk's arrival time is
taken once per HTTP body chunk read (right after `next_chunk()` returns it), so events that
arrive together share a time, as the user of a stream would see them. Per output chunk we count tokens from continuous usage stats when the
server sends them, else one per chunk; the final usage (stream_options.include_usage) gives
the authoritative totals and `cached_tokens`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx
import orjson

from tandem.bench.sample import RequestSample
from tandem.http.client import ClientConfig as HTTPConfig
from tandem.http.client import HTTPClient, HTTPFailure, Response

ROUTE_HEADERS = ("x-tandem-prefill", "x-tandem-decode")


@dataclass(frozen=True)
class ClientConfig:
    base_url: str                      # http://host:port (no /v1)
    model: str
    endpoint: str = "completions"      # completions | chat
    api_key: str | None = None
    ignore_eos: bool = True            # output lengths follow the workload's max_tokens
    temperature: float = 0.0
    continuous_usage_stats: bool = False  # ask for usage in every chunk (vLLM); exact tokens per chunk
    request_timeout_s: float = 600.0   # no byte for this long fails the request
    keep_text: bool = False            # collect the output text (agentic turns need it)
    # more fields of every request body, e.g. (("priority", 10), ("cache_salt", "run-2")); they
    # never replace the fields above
    extra_body: tuple[tuple[str, object], ...] = ()


@dataclass
class Reply:
    sample: RequestSample
    text: str


def render_chat_as_text(messages: list[dict]) -> str:
    """Plain prompt for chat workloads sent to /v1/completions (no chat template)."""
    return "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages) + "<|assistant|>\n"


class StreamingClient:
    def __init__(self, cfg: ClientConfig) -> None:
        self.cfg = cfg
        self._headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
        # every connection a run opened stays for a later request: a new one would count in TTFT
        self._http = HTTPClient(HTTPConfig(connect_timeout_s=30.0, max_idle_per_origin=1 << 30))

    async def aclose(self) -> None:
        await self._http.aclose()

    def build_body(self, max_tokens: int, prompt_ids=None, messages=None, tools=None) -> dict:
        cfg = self.cfg
        body: dict = {**dict(cfg.extra_body), "model": cfg.model, "max_tokens": max_tokens, "stream": True,
                      "temperature": cfg.temperature,
                      "stream_options": {"include_usage": True}}
        if cfg.continuous_usage_stats:
            body["stream_options"]["continuous_usage_stats"] = True
        if cfg.ignore_eos:
            body["ignore_eos"] = True
        if cfg.endpoint == "chat":
            if messages is None:
                raise ValueError("the chat endpoint needs messages; token-id prompts need --endpoint completions")
            body["messages"] = messages
            if tools:
                body["tools"] = tools
        else:
            body["prompt"] = prompt_ids if prompt_ids is not None else render_chat_as_text(messages)
        return body

    async def send(self, body: dict, sample: RequestSample, t0: float,
                   headers: dict[str, str] | None = None) -> Reply:
        """POST one streaming request; fill `sample` (times relative to t0 = run start)."""
        path = "/v1/chat/completions" if self.cfg.endpoint == "chat" else "/v1/completions"
        content = orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)
        parts: list[str] = []
        start = time.perf_counter()
        sample.start = start - t0
        try:
            async with self._http.stream("POST", self.cfg.base_url, path, content,
                                         self.cfg.request_timeout_s,
                                         {**self._headers, **(headers or {})}) as resp:
                sample.status = resp.status
                sample.headers = {k: resp.headers[k] for k in ROUTE_HEADERS if k in resp.headers}
                if resp.status != 200:
                    sample.error = f"http {resp.status}: {_error_message(await resp.read())}"
                else:
                    await self._read_stream(resp, sample, start, parts)
        except (HTTPFailure, ValueError) as exc:   # ValueError: a malformed SSE event (orjson)
            sample.error = f"{type(exc).__name__}: {exc}"
        finally:
            sample.end = time.perf_counter() - t0
        return Reply(sample, "".join(parts))

    async def _read_stream(self, resp: Response, sample: RequestSample, start: float,
                           parts: list[str]) -> None:
        chat = self.cfg.endpoint == "chat"
        keep = self.cfg.keep_text
        buf = b""
        done = False
        usage = None
        last_completion = 0   # completion_tokens of the last continuous usage seen
        finish_time = None    # when a choice reported its finish_reason
        while (raw := await resp.next_chunk()) is not None:
            now = time.perf_counter() - start
            buf += raw
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    done = True
                    continue
                event = orjson.loads(payload)
                if "error" in event:
                    err = event["error"]
                    sample.error = "stream error: " + (err.get("message", str(err)) if isinstance(err, dict) else str(err))
                    continue
                u = event.get("usage")
                if u:
                    usage = u
                for choice in event.get("choices") or ():
                    if chat:
                        delta = choice.get("delta") or {}
                        text = delta.get("content") or delta.get("reasoning_content") or ""
                        has_output = bool(text) or bool(delta.get("tool_calls"))
                    else:
                        text = choice.get("text") or ""
                        has_output = bool(text)
                    if u and u.get("completion_tokens") is not None:
                        n = u["completion_tokens"] - last_completion
                        last_completion = u["completion_tokens"]
                        has_output = has_output or n > 0
                    else:
                        n = 1
                    if text and sample.first_text is None:
                        sample.first_text = now
                    if has_output:
                        sample.chunk_times.append(now)
                        sample.chunk_tokens.append(max(n, 1))
                        if keep and text:
                            parts.append(text)
                    if choice.get("finish_reason"):
                        sample.finish_reason = choice["finish_reason"]
                        finish_time = now
        if sample.error is None and not done:
            sample.error = "incomplete stream: no [DONE]"
        if usage:
            sample.prompt_tokens = int(usage.get("prompt_tokens") or 0)
            sample.completion_tokens = int(usage.get("completion_tokens") or 0)
            details = usage.get("prompt_tokens_details") or {}
            if details.get("cached_tokens") is not None:
                sample.cached_tokens = int(details["cached_tokens"])
        else:
            sample.prompt_tokens = sample.expected_prompt_tokens
            sample.completion_tokens = sum(sample.chunk_tokens)
        if not sample.chunk_times and sample.completion_tokens > 0 and finish_time is not None:
            # tokens were generated but all decoded to no text (e.g. special tokens): the user
            # saw the whole answer at once, at the finishing chunk
            sample.chunk_times.append(finish_time)
            sample.chunk_tokens.append(sample.completion_tokens)
        if sample.error is None and not sample.chunk_times:
            sample.error = "empty stream: no output chunk"


def _error_message(raw: bytes) -> str:
    try:
        err = orjson.loads(raw).get("error")
        if isinstance(err, dict):
            return str(err.get("message"))
        return str(err)
    except (orjson.JSONDecodeError, AttributeError):
        return raw[:200].decode(errors="replace")


async def fetch_models(base_url: str, api_key: str | None = None, timeout_s: float = 10.0) -> list[dict]:
    """GET /v1/models -> its `data` list (id, and for vLLM `root` = the model directory)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    async with httpx.AsyncClient(timeout=timeout_s) as http:
        resp = await http.get(base_url.rstrip("/") + "/v1/models", headers=headers)
        resp.raise_for_status()
        return resp.json().get("data", [])
