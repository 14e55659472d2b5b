"""What the multi-host tests send and check: completions by token ids (no tokenizer between the
test and the reference engine), streams with their chunks' arrival times, KV blocks held."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import httpx

from tandem.testing.hosts import HostCluster


def prompt(seed: int, n: int = 48) -> list[int]:
    """A deterministic prompt of n token ids (the tiny model's vocabulary is 512; ids 3.. are
    ordinary tokens)."""
    return [3 + (seed * 7919 + i * 31) % 500 for i in range(n)]


def complete(url: str, ids: list[int], max_tokens: int, timeout_s: float = 60.0) -> httpx.Response:
    body = {"model": "m", "prompt": ids, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
    return httpx.post(url + "/v1/completions", json=body, timeout=timeout_s)


@dataclass
class Streamed:
    status: int
    headers: dict
    text: str = ""
    chunks: list[tuple[float, str]] = field(default_factory=list)   # (arrival, text)
    usage: dict | None = None
    error: str | None = None

    def longest_gap(self) -> float:
        times = [t for t, _ in self.chunks]
        return max((b - a for a, b in zip(times, times[1:])), default=0.0)


def stream(url: str, ids: list[int], max_tokens: int, on_chunk: Callable[[int, Streamed], None] | None = None,
           timeout_s: float = 60.0) -> Streamed:
    """A streamed completion read to its end; on_chunk(i, so_far) after each text chunk."""
    body = {"model": "m", "prompt": ids, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=timeout_s) as r:
        out = Streamed(r.status_code, dict(r.headers))
        if r.status_code != 200:
            out.error = r.read().decode(errors="replace")
            return out
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if "error" in event:
                out.error = json.dumps(event["error"])
                continue
            if event.get("usage"):
                out.usage = event["usage"]
            for c in event.get("choices", []):
                if c.get("text"):
                    out.text += c["text"]
                    out.chunks.append((time.monotonic(), c["text"]))
                    if on_chunk is not None:
                        on_chunk(len(out.chunks), out)
    return out


def text_of(r: httpx.Response) -> str:
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


def blocks_held(url: str) -> int:
    """KV blocks a worker holds for requests (blocks of the prefix cache are free: evictable)."""
    s = httpx.get(url + "/internal/stats", timeout=5).json()
    return s["num_blocks_total"] - s["num_blocks_free"] + s["num_running"] + s["num_waiting"]


def wait_no_blocks_held(cluster: HostCluster, names: Iterable[str], timeout_s: float = 30.0) -> float:
    """The idle invariant on each named worker: nothing running or waiting, every block free."""
    names = list(names)
    try:
        return cluster.wait_until(f"no KV block held on {', '.join(names)}",
                                  lambda: all(blocks_held(cluster.url(n)) == 0 for n in names),
                                  timeout_s, watch=names, poll_s=0.2)
    except AssertionError as exc:
        stats = {}
        for n in names:
            try:
                stats[n] = httpx.get(cluster.url(n) + "/internal/stats", timeout=5).json()
            except (httpx.HTTPError, ValueError) as err:
                stats[n] = repr(err)
        raise AssertionError(f"{exc}\nstats: {stats}") from None


def metric(url: str, name: str) -> float:
    total = 0.0
    for line in httpx.get(url + "/metrics", timeout=5).text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def tier_metric(url: str, name: str, tier: str) -> float:
    """A KV tier's metric on a worker, e.g. tier_metric(url, "kv_offload_tiering_available", "store")."""
    for line in httpx.get(url + "/metrics", timeout=5).text.splitlines():
        if line.startswith(f"tandem:{name}{{") and f'tier="{tier}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0
