"""The Responses API and Anthropic's Messages API end to end, with the official `openai` and
`anthropic` clients, against `tandem up --prefill 1 --decode 1` and a single `tandem serve` worker
(a random-weight test model whose chat template uses the hermes tool-call format).

Forced tool calls (a named function, `any`, `required`) are sampled at temperature 1 and must still
be valid calls of the offered tool; streamed events reassemble to the final object; a tool result
goes back through `previous_response_id` (Responses) or `tool_result` blocks (Messages); bad input
is a 400 in each API's own error shape.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import anthropic
import httpx
import openai
import pytest

from tandem import cluster_secret
from tandem.launcher.cluster import free_port
from tandem.testing.server_process import stop, wait_healthy
from tandem.testing.tiny_model import write_test_model

pytestmark = pytest.mark.timeout(300)

WORKER_ARGS = ("--kv-cache-memory=16MiB", "--dtype=float32")
SECRET = "e2e-agent-apis-secret"   # tandem up's cluster secret, to list its workers
CITIES = ["Paris", "Rome", "Oslo"]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "enum": CITIES},
                                           "days": {"type": "integer", "minimum": 1, "maximum": 9}},
          "required": ["city", "days"], "additionalProperties": False}
RESPONSES_TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather forecast",
                    "parameters": SCHEMA, "strict": True},
                   {"type": "function", "name": "get_time", "description": "Local time",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": CITIES}},
                                   "required": ["city"], "additionalProperties": False}}]
MESSAGES_TOOLS = [{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
                  for t in RESPONSES_TOOLS]


def valid_call(name: str, args: dict) -> bool:
    if name == "get_weather":
        return set(args) == {"city", "days"} and args["city"] in CITIES and \
            isinstance(args["days"], int) and 1 <= args["days"] <= 9
    return name == "get_time" and args == {"city": args.get("city")} and args["city"] in CITIES


def _wait_workers(base: str, proc: subprocess.Popen, n: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, "tandem up exited"
        try:
            workers = httpx.get(base + "/internal/workers", headers=cluster_secret.headers(SECRET),
                                timeout=5).json()["workers"]
            if len(workers) == n and all(w["healthy"] for w in workers):
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the cluster's workers did not become healthy"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    return str(write_test_model(tmp_path_factory.mktemp("agent") / "agent-tiny", "Qwen3ForCausalLM", seed=3))


@pytest.fixture(scope="module", params=["up-pd", "worker"])
def base(request, model, tmp_path_factory):
    """The server's base URL: a gateway over one prefill and one decode worker, or one worker."""
    port = free_port()
    log = open(tmp_path_factory.mktemp("logs") / f"{request.param}.log", "w")
    if request.param == "up-pd":
        cmd = [sys.executable, "-m", "tandem.cli", "up", "--model", model, "--prefill", "1", "--decode", "1",
               "--port", str(port), "--ready-timeout", "120", "--log-level", "warning",
               *(f"--worker-arg={a}" for a in WORKER_ARGS)]
    else:
        cmd = [sys.executable, "-m", "tandem.cli", "serve", "--model", model, "--port", str(port),
               "--threads", "1", "--log-level", "warning", *WORKER_ARGS]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                            env=dict(os.environ, TANDEM_CLUSTER_SECRET=SECRET))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, 120)
        if request.param == "up-pd":
            _wait_workers(url, proc, 2)
        yield url
    finally:
        stop(proc, signal.SIGINT if request.param == "up-pd" else signal.SIGTERM, grace_s=30)
        log.close()


@pytest.fixture
def oai(base):
    return openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)


@pytest.fixture
def claude(base):
    return anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0)


NAME = "agent-tiny"


# -- Responses ---------------------------------------------------------------------------------
def test_responses_text_usage_and_cache(oai):
    first = oai.responses.create(model=NAME, input="Tell me a story.", max_output_tokens=8, temperature=0)
    assert first.status in ("completed", "incomplete") and first.object == "response"
    assert [o.type for o in first.output] == ["message"]       # no tools offered: no call
    assert first.output_text == first.output[0].content[0].text
    u = first.usage
    assert 0 < u.output_tokens <= 8 and u.input_tokens > 0 and u.total_tokens == u.input_tokens + u.output_tokens
    again = oai.responses.create(model=NAME, input="Tell me a story.", max_output_tokens=8, temperature=0)
    assert again.output_text == first.output_text               # greedy: the same text
    assert again.usage.input_tokens_details.cached_tokens > 0  # the prompt's blocks were cached


def test_responses_stream_forced_call_is_valid(oai):
    for _ in range(3):
        with oai.responses.stream(model=NAME, input="Weather in Oslo for three days?", tools=RESPONSES_TOOLS,
                                  tool_choice={"type": "function", "name": "get_weather"},
                                  temperature=1.0, max_output_tokens=120) as stream:
            events = list(stream)
            final = stream.get_final_response()
        types = [e.type for e in events]
        assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed"
        assert [e.sequence_number for e in events] == list(range(len(events)))
        [call] = [o for o in final.output if o.type == "function_call"]
        args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
        assert args == call.arguments
        assert call.name == "get_weather" and valid_call(call.name, json.loads(call.arguments))


def test_responses_required_call_and_function_call_output_round_trip(oai):
    first = oai.responses.create(model=NAME, input="What time is it in Rome?", tools=RESPONSES_TOOLS,
                                 tool_choice="required", parallel_tool_calls=False, temperature=1.0,
                                 max_output_tokens=120)
    calls = [o for o in first.output if o.type == "function_call"]
    assert len(calls) == 1 and valid_call(calls[0].name, json.loads(calls[0].arguments))
    second = oai.responses.create(model=NAME, previous_response_id=first.id, tools=RESPONSES_TOOLS,
                                  max_output_tokens=8, input=[{"type": "function_call_output",
                                                               "call_id": calls[0].call_id,
                                                               "output": "It is 10:42."}])
    assert second.previous_response_id == first.id
    # the history (the first input and its call) is rendered before the tool output
    assert second.usage.input_tokens > first.usage.input_tokens
    assert oai.responses.retrieve(first.id).output[-1].call_id == calls[0].call_id


def test_responses_errors(oai):
    with pytest.raises(openai.BadRequestError) as e:
        oai.responses.create(model=NAME, input=[{"role": "user", "content": [{"type": "input_text"}]}])
    assert e.value.status_code == 400 and e.value.body["param"] == "input[0].content[0].text"
    with pytest.raises(openai.BadRequestError) as e:
        oai.responses.create(model=NAME, input="x", tools=RESPONSES_TOOLS,
                             tool_choice={"type": "function", "name": "missing"})
    assert e.value.body["param"] == "tool_choice"
    with pytest.raises(openai.NotFoundError) as e:
        oai.responses.create(model=NAME, input="x", previous_response_id="resp_unknown")
    assert e.value.body["param"] == "previous_response_id"


# -- Messages ----------------------------------------------------------------------------------
def test_messages_text_and_usage(claude):
    # this client no longer sends sampling fields; older ones did, and tandem still reads them
    msg = claude.messages.create(model=NAME, max_tokens=8, extra_body={"temperature": 0},
                                 messages=[{"role": "user", "content": "Tell me a story."}])
    assert msg.type == "message" and msg.role == "assistant"
    assert [b.type for b in msg.content] == ["text"] and msg.stop_reason in ("max_tokens", "end_turn")
    assert 0 < msg.usage.output_tokens <= 8 and msg.usage.input_tokens > 0
    again = claude.messages.create(model=NAME, max_tokens=8, extra_body={"temperature": 0},
                                   messages=[{"role": "user", "content": "Tell me a story."}])
    assert again.content[0].text == msg.content[0].text
    assert again.usage.cache_read_input_tokens > 0


def test_messages_stream_forced_tool_is_valid(claude):
    for choice in ({"type": "tool", "name": "get_weather"}, {"type": "any", "disable_parallel_tool_use": True}):
        with claude.messages.stream(model=NAME, max_tokens=120, extra_body={"temperature": 1.0},
                                    tools=MESSAGES_TOOLS,
                                    tool_choice=choice,
                                    messages=[{"role": "user", "content": "Weather in Paris?"}]) as stream:
            events = list(stream)
            final = stream.get_final_message()
        types = [e.type for e in events]
        assert types[0] == "message_start" and types[-1] == "message_stop" and "message_delta" in types
        uses = [b for b in final.content if b.type == "tool_use"]
        assert len(uses) == 1 and valid_call(uses[0].name, uses[0].input)
        assert final.stop_reason == "tool_use" and uses[0].id.startswith("toolu_")
        partial = "".join(e.delta.partial_json for e in events
                          if e.type == "content_block_delta" and e.delta.type == "input_json_delta")
        assert json.loads(partial) == uses[0].input


def test_messages_tool_result_round_trip(claude):
    first = claude.messages.create(model=NAME, max_tokens=120, extra_body={"temperature": 1.0},
                                   tools=MESSAGES_TOOLS,
                                   tool_choice={"type": "tool", "name": "get_time"},
                                   messages=[{"role": "user", "content": "Time in Oslo?"}])
    [use] = [b for b in first.content if b.type == "tool_use"]
    second = claude.messages.create(model=NAME, max_tokens=8, tools=MESSAGES_TOOLS, messages=[
        {"role": "user", "content": "Time in Oslo?"},
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "10:42"}]}])
    assert second.stop_reason in ("max_tokens", "end_turn", "tool_use")
    assert second.usage.cache_read_input_tokens > 0              # the first turn's prompt is a prefix


def test_messages_errors(claude):
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model=NAME, max_tokens=0, messages=[{"role": "user", "content": "x"}])
    assert e.value.status_code == 400 and e.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model=NAME, max_tokens=8, tools=MESSAGES_TOOLS,
                               tool_choice={"type": "tool", "name": "missing"},
                               messages=[{"role": "user", "content": "x"}])
    assert "tool_choice.name" in e.value.body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError) as e:
        claude.messages.create(model="claude-unknown", max_tokens=8, messages=[{"role": "user", "content": "x"}])
    assert e.value.body["error"]["type"] == "not_found_error"
    count = claude.messages.count_tokens(model=NAME, messages=[{"role": "user", "content": "x"}])
    assert count.input_tokens > 0
