"""KV retention end to end: a real `tandem serve` with a small KV cache behind a real gateway. Two
chat sessions without x-session-affinity (the gateway recognises them by their fingerprint and
sends it as the session id); one says, in the header, that its next turn comes within a minute.
One-shot prompts sent straight to the worker then flow through several times its cache. The next
turn of the hinted session finds its whole first turn cached; the other session's (plain LRU)
none of it. /metrics counts the retention and the observed gap; every block is free at the end."""

from __future__ import annotations

import httpx
import pytest

from tandem.launcher.cluster import LocalCluster, ProcSpec, free_port, gateway_proc, worker_proc
from tests.e2e.test_gateway_e2e import assert_no_blocks_held, metric, running

pytestmark = pytest.mark.timeout(300)


def _chat(base: str, messages: list[dict], headers: dict | None = None) -> dict:
    r = httpx.post(base + "/v1/chat/completions", headers=headers, timeout=120, json={
        "model": "m", "messages": messages, "max_tokens": 6, "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200, r.text
    return r.json()


def test_a_hinted_session_keeps_its_context_through_one_shot_pressure(llama_dir):
    model = str(llama_dir)
    worker = worker_proc("w0", model, "both", "127.0.0.1", free_port(), None,
                         ("--num-kv-blocks", "40", "--dtype", "float32", "--served-model-name", "m",
                          "--device", "cpu", "--kv-retention-share", "0.5"))
    gateway = gateway_proc(model, "127.0.0.1", free_port(avoid={int(worker.url.rsplit(":", 1)[1])}), [worker],
                           "round_robin", ("--served-model-name", "m", "--no-queue"))
    cluster = LocalCluster([worker, ProcSpec("gateway", gateway.cmd, gateway.url, None)])
    sessions = {name: [{"role": "system", "content": f"Agent {name} reads files and runs tools. " * 12},
                       {"role": "user", "content": f"Task {name}: list the files."}] for name in "AB"}
    hint = {"x-agent-expect-next-turn-s": "60"}
    with running(cluster):
        first = {}
        for name, msgs in sessions.items():
            reply = _chat(gateway.url, msgs, hint if name == "A" else None)
            first[name] = reply["usage"]["prompt_tokens"]
            msgs += [{"role": "assistant", "content": reply["choices"][0]["message"]["content"] or "ok"},
                     {"role": "user", "content": "Tool result: a.txt b.txt. Next?"}]
        assert metric(worker.url, "tandem:kv_retained_blocks") >= first["A"] // 16
        oneshot = 0
        for i in range(8):   # each smaller than the 24 unretained blocks; 8 x ~8 through a 40-block cache
            r = httpx.post(worker.url + "/v1/completions", timeout=120, json={
                "model": "m", "prompt": f"One-shot {i} about the fox. " * 8, "max_tokens": 2})
            assert r.status_code == 200, r.text
            oneshot += r.json()["usage"]["prompt_tokens"]
        assert 5 * 16 < oneshot / 8 < 20 * 16 and oneshot > 2 * 40 * 16
        cached = {name: _chat(gateway.url, msgs)["usage"]["prompt_tokens_details"]["cached_tokens"]
                  for name, msgs in sessions.items()}
        assert cached["A"] >= first["A"] // 16 * 16 - 16, (cached, first)
        assert cached["B"] < 0.2 * first["B"], (cached, first)
        assert metric(worker.url, "tandem:kv_retention_hits_total") == 1
        assert metric(worker.url, "tandem:session_turn_gap_seconds_count") == 1
        assert_no_blocks_held(cluster)
