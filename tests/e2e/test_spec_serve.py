"""`tandem serve --speculative-config JSON` end to end: a worker process with n-gram speculation
serves the demo model's tool call exactly as one without, and /metrics carries vLLM's
spec-decode counters under tandem:."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tandem.launcher.cluster import free_port
from tandem.testing.server_process import stop, wait_healthy

pytestmark = pytest.mark.timeout(300)

MODEL = str(Path(__file__).resolve().parents[2] / "models" / "tandem-demo-target")
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
BODY = {"model": "m", "max_tokens": 48, "temperature": 0.0, "tools": TOOLS,
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}]}


def _serve(*extra: str):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tandem.cli", "serve", "--model", MODEL, "--port", str(port),
         "--dtype", "float32", "--threads", "1", "--kv-cache-memory", "16MiB",
         "--served-model-name", "m", "--log-level", "warning", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout_s=120)
    except Exception:
        stop(proc)
        raise
    return proc, url


def _metrics(url: str) -> dict[str, float]:
    """tandem:spec_decode_* samples, summed over their labels."""
    out: dict[str, float] = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("tandem:spec_decode"):
            sample, value = line.rsplit(" ", 1)
            name = sample.split("{")[0]
            out[name] = out.get(name, 0.0) + float(value)
    return out


def test_serve_with_ngram_speculation_reports_spec_metrics():
    config = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2}
    plain, plain_url = _serve()
    try:
        ref = httpx.post(plain_url + "/v1/chat/completions", json=BODY, timeout=120).json()
    finally:
        stop(plain)
    spec, url = _serve("--speculative-config", json.dumps(config))
    try:
        r = httpx.post(url + "/v1/chat/completions", json=BODY, timeout=120)
        assert r.status_code == 200, r.text
        def answer(reply):   # call ids are random
            msg = reply["choices"][0]["message"]
            return msg.get("content"), [c["function"] for c in msg.get("tool_calls") or []], reply["usage"]

        assert answer(r.json()) == answer(ref)
        assert answer(ref)[1] == [{"name": "get_weather", "arguments": '{"city": "Paris"}'}]
        m = _metrics(url)
        drafts = m["tandem:spec_decode_num_draft_tokens_total"]
        accepted = m["tandem:spec_decode_num_accepted_tokens_total"]
        assert m["tandem:spec_decode_num_drafts_total"] > 0 and 0 < accepted <= drafts
        assert any(k.startswith("tandem:spec_decode_num_accepted_tokens_per_pos") for k in m)
    finally:
        stop(spec)


def test_a_bad_speculative_config_is_a_usage_error():
    out = subprocess.run([sys.executable, "-m", "tandem.cli", "serve", "--model", MODEL,
                          "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 0}'],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "--speculative-config" in out.stderr and "num_speculative_tokens must be in 1..64" in out.stderr
