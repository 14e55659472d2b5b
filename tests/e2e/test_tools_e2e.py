"""Tool calls and structured outputs end to end, with the official `openai` client, through
`tandem up --prefill 1 --decode 1` (a random-weight test model whose chat template is Hermes-style,
so the tool-call parser is recognized from it), and a tool call from the shipped demo model.

Random weights at temperature 1 write anything the grammar allows: forced calls and json_schema
outputs must still always parse and validate. Seeds make every run reproducible.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest

from tandem.launcher.cluster import free_port
from tandem.testing.server_process import stop, tandem_up, wait_healthy
from tandem_demo.schema_check import validate

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "models" / "tandem-demo-target"
WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 12},
    "days": {"type": "integer", "minimum": 1, "maximum": 14},
    "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "days"], "additionalProperties": False}
TIMER = {"type": "object", "properties": {"seconds": {"type": "integer", "minimum": 1, "maximum": 3600}},
         "required": ["seconds"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather forecast",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "set_timer", "parameters": TIMER}}]
SCHEMAS = {"get_weather": WEATHER, "set_timer": TIMER}
ASK = [{"role": "user", "content": "What's the weather in Paris for the next 3 days?"}]
SEEDS = (1, 2, 3, 4)


@pytest.fixture(scope="module")
def cluster(llama_dir):
    """`tandem up --prefill 1 --decode 1` on free ports; yields the gateway's base URL."""
    port = free_port()
    with tandem_up(["--model", str(llama_dir), "--prefill", "1", "--decode", "1", "--port", str(port),
                    "--ready-timeout", "180", "--worker-arg=--kv-cache-memory=16MiB",
                    "--worker-arg=--dtype=float32", "--worker-arg=--served-model-name=m",
                    "--gateway-arg=--served-model-name=m"],
                   cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def client(cluster) -> openai.OpenAI:
    return openai.OpenAI(base_url=cluster + "/v1", api_key="unused", max_retries=0, timeout=120)


def assert_valid(calls, names=frozenset(SCHEMAS), most: int | None = None) -> None:
    assert calls, "no tool call"
    assert most is None or len(calls) <= most
    for c in calls:
        assert c.type == "function" and c.id.startswith("call_")
        assert c.function.name in names
        assert validate(json.loads(c.function.arguments), SCHEMAS[c.function.name]) == []


def stream_message(client, **kw) -> tuple[str | None, list[dict], str]:
    """(content, calls rebuilt from their deltas, finish reason) of a streamed chat."""
    content, calls, finish = None, {}, None
    for chunk in client.chat.completions.create(model="m", stream=True, **kw):
        for ch in chunk.choices:
            d = ch.delta
            if d.content:
                assert "<tool_call>" not in d.content
                content = (content or "") + d.content
            for tc in d.tool_calls or []:
                if tc.id is not None:   # a call's first delta: index, id, type, name, no arguments
                    assert tc.type == "function" and tc.function.name and tc.function.arguments == ""
                    calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": ""}
                else:
                    calls[tc.index]["arguments"] += tc.function.arguments
            finish = ch.finish_reason or finish
    return content, [calls[i] for i in sorted(calls)], finish


def test_streamed_tool_call_deltas_reassemble_to_the_non_streamed_call(client):
    for choice in ("required", "auto"):
        kw = dict(messages=ASK, tools=TOOLS, tool_choice=choice, temperature=0, max_tokens=300)
        whole = client.chat.completions.create(model="m", **kw).choices[0]
        content, calls, finish = stream_message(client, **kw)
        assert finish == whole.finish_reason
        assert content == whole.message.content
        assert [(c["name"], c["arguments"]) for c in calls] == \
            [(c.function.name, c.function.arguments) for c in whole.message.tool_calls or []]
        if choice == "required":
            assert whole.finish_reason == "tool_calls" and whole.message.content is None
            assert_valid(whole.message.tool_calls)


@pytest.mark.parametrize("seed", SEEDS)
def test_forced_calls_from_random_weights_at_temperature_1_always_validate(client, seed):
    r = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="required",
                                       temperature=1, seed=seed, max_tokens=1000)
    assert r.choices[0].finish_reason == "tool_calls"
    assert_valid(r.choices[0].message.tool_calls)
    r = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="required",
                                       parallel_tool_calls=False, temperature=1, seed=seed, max_tokens=300)
    assert_valid(r.choices[0].message.tool_calls, most=1)
    r = client.chat.completions.create(
        model="m", messages=ASK, tools=TOOLS, temperature=1, seed=seed, max_tokens=300, n=2,
        tool_choice={"type": "function", "function": {"name": "set_timer"}})
    for choice in r.choices:
        assert_valid(choice.message.tool_calls, names={"set_timer"}, most=1)


@pytest.mark.parametrize("seed", SEEDS)
def test_json_schema_outputs_from_random_weights_always_validate(client, seed):
    schema = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 20},
                                               "score": {"type": "integer", "minimum": 0, "maximum": 10},
                                               "ok": {"type": "boolean"}},
              "required": ["answer", "score", "ok"], "additionalProperties": False}
    r = client.chat.completions.create(
        model="m", messages=ASK, temperature=1, seed=seed, max_tokens=300,
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema, "strict": True}})
    assert r.choices[0].finish_reason == "stop"
    assert validate(json.loads(r.choices[0].message.content), schema) == []
    r = client.chat.completions.create(model="m", messages=ASK, temperature=1, seed=seed, max_tokens=20,
                                       extra_body={"structured_outputs": {"choice": ["yes", "no"]}})
    assert r.choices[0].message.content in ("yes", "no")


def test_a_tool_result_turn(client):
    turn = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="required",
                                          parallel_tool_calls=False, temperature=0, max_tokens=300)
    call = turn.choices[0].message.tool_calls[0]
    history = ASK + [turn.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": '{"forecast": "sunny", "high": 21}'}]
    r = client.chat.completions.create(model="m", messages=history, tools=TOOLS, temperature=0,
                                       max_tokens=20)
    assert r.usage.prompt_tokens > turn.usage.prompt_tokens + 10   # the call and its result are in the prompt
    r = client.chat.completions.create(model="m", messages=history, tools=TOOLS, tool_choice="required",
                                       parallel_tool_calls=False, temperature=1, seed=5, max_tokens=300)
    assert_valid(r.choices[0].message.tool_calls, most=1)


def test_no_tool_call_when_no_tools_are_offered(client):
    for seed in SEEDS:
        r = client.chat.completions.create(model="m", messages=ASK, temperature=1, seed=seed, max_tokens=40)
        assert r.choices[0].message.tool_calls is None and r.choices[0].finish_reason in ("stop", "length")


def test_bad_requests_are_400_naming_the_parameter_through_the_gateway(cluster, client):
    def post(stream: bool = False, **body):
        return httpx.post(cluster + "/v1/chat/completions", timeout=60,
                          json={"model": "m", "messages": ASK, "max_tokens": 5, "stream": stream, **body})

    bad_schema = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "nonsense"}}}
    cases = [({"tools": [{"type": "function", "function": {"name": "no spaces"}}]}, "tools[0].function.name"),
             ({"tools": [{"type": "function"}]}, "tools[0].function"),
             ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "missing"}}},
              "tool_choice"),
             ({"tool_choice": "required"}, "tool_choice"),
             ({"response_format": bad_schema}, "response_format"),
             ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
                 "type": "object", "properties": {"a": {"type": "nonsense"}}}}}], "tool_choice": "required"},
              "tools"),
             ({"structured_outputs": {"regex": "a[b"}}, "structured_outputs"),
             ({"structured_outputs": {"grammar": "root ::= ("}}, "structured_outputs")]
    for body, param in cases:
        for stream in (False, True):
            r = post(stream, **body)
            assert r.status_code == 400, (body, r.text)
            assert r.json()["error"]["param"] == param, (body, r.text)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="m", messages=ASK, response_format=bad_schema)
    assert post(max_tokens=3).status_code == 200    # nothing stalled


@pytest.fixture(scope="module")
def demo_server():
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tandem.cli", "serve", "--model", str(DEMO), "--port", str(port),
         "--threads", "1", "--device", "cpu", "--num-kv-blocks", "128", "--log-level", "warning"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, 180)
        yield url
    finally:
        stop(proc)


def test_the_demo_model_calls_a_tool_and_it_comes_back_parsed(demo_server):
    from tandem_demo.tools import tool_catalog

    tools = [t for t in tool_catalog() if t["function"]["name"] in ("get_weather", "calculator", "send_email")]
    client = openai.OpenAI(base_url=demo_server + "/v1", api_key="unused", max_retries=0, timeout=120)
    r = client.chat.completions.create(model="tandem-demo-target", tools=tools, temperature=0, max_tokens=60,
                                       messages=[{"role": "user", "content": "What's the weather in Paris?"}])
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments)["city"] == "Paris"
