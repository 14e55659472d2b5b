"""Issue #33 through real `tandem serve` processes of the shipped demo model (hermes format, which
answers some ordinary questions with a `<tool_call>` naming tools nobody offered), with the
official `openai` client:
- the tool-call guard (on by default): no ordinary answer opens a call, while a request offering
  tools still gets one; with `--tool-call-parser none` nothing guards and the calls show as text;
- a prompt over the context is openai.BadRequestError, code context_length_exceeded;
- with `--tool-call-parser none`, tool_choice "required" or a named function is forced as plain
  JSON and comes back as tool_calls, streamed or not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from tandem_demo.schema_check import validate
from tandem.launcher.cluster import free_port
from tandem.testing.server_process import stop, wait_healthy

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "models" / "tandem-demo-target"
MAX_LEN = 512
# at temperature 0 the demo model answers three of these with a call when nothing guards it
QUESTIONS = ["What is the capital of France?", "Tell me a short joke.", "How many legs does a spider have?",
             "What is 12 times 7?", "Write a haiku about the sea.", "Who wrote Hamlet?",
             "What's the weather in Paris?"]
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
           "required": ["city"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "Local time in a city",
                                           "parameters": WEATHER}}]


def _serve(*flags: str):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tandem.cli", "serve", "--model", str(DEMO), "--port", str(port),
         "--threads", "1", "--device", "cpu", "--num-kv-blocks", "64", "--max-model-len", str(MAX_LEN),
         "--served-model-name", "demo", "--log-level", "warning", *flags],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, 180)
        yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def guarded():
    yield from _serve()


@pytest.fixture(scope="module")
def no_parser():
    yield from _serve("--tool-call-parser", "none")


def _answers(client) -> list[str]:
    return [client.chat.completions.create(model="demo", messages=[{"role": "user", "content": q}],
                                           temperature=0, max_tokens=60).choices[0].message.content
            for q in QUESTIONS]


def test_no_ordinary_answer_opens_a_call_yet_tools_still_get_one(guarded, no_parser):
    assert sum("<tool_call>" in a for a in _answers(no_parser)) >= 2   # the issue, unguarded
    assert not any("<tool_call>" in a for a in _answers(guarded))
    r = guarded.chat.completions.create(model="demo", tools=TOOLS, temperature=0, max_tokens=60,
                                        messages=[{"role": "user", "content": "What's the weather in Paris?"}])
    assert r.choices[0].finish_reason == "tool_calls"
    assert r.choices[0].message.tool_calls[0].function.name == "get_weather"
    r = guarded.chat.completions.create(model="demo", tools=TOOLS, tool_choice="none", temperature=0, max_tokens=60,
                                        messages=[{"role": "user", "content": "What's the weather in Paris?"}])
    assert r.choices[0].message.tool_calls is None and "<tool_call>" not in r.choices[0].message.content


def test_a_prompt_over_the_context_is_a_bad_request_context_length_exceeded(guarded):
    long = [{"role": "user", "content": "Paris " * MAX_LEN}]
    with pytest.raises(openai.BadRequestError) as info:
        guarded.chat.completions.create(model="demo", messages=long, max_tokens=5)
    err = info.value.body
    assert info.value.status_code == 400 and (err["code"], err["param"]) == ("context_length_exceeded", "messages")
    assert err["message"].startswith(f"This model's maximum context length is {MAX_LEN} tokens. However, your "
                                      "request has ")
    with pytest.raises(openai.BadRequestError) as info:
        guarded.completions.create(model="demo", prompt="Paris " * MAX_LEN, max_tokens=5)
    assert (info.value.body["code"], info.value.body["param"]) == ("context_length_exceeded", "prompt")


def _streamed(client, **kw) -> tuple[list[tuple[str, str]], str]:
    calls, finish = {}, None
    for chunk in client.chat.completions.create(model="demo", stream=True, **kw):
        for ch in chunk.choices:
            assert not ch.delta.content
            for tc in ch.delta.tool_calls or []:
                call = calls.setdefault(tc.index, ["", ""])
                call[0] += tc.function.name or ""
                call[1] += tc.function.arguments or ""
            finish = ch.finish_reason or finish
    return [tuple(calls[i]) for i in sorted(calls)], finish


def test_forced_calls_without_a_tool_call_parser_are_json_parsed_back(no_parser):
    ask = [{"role": "user", "content": "What's the weather in Paris?"}]
    for choice, names in (("required", {"get_weather", "get_time"}),
                          ({"type": "function", "function": {"name": "get_time"}}, {"get_time"})):
        kw = dict(messages=ask, tools=TOOLS, tool_choice=choice, parallel_tool_calls=False, temperature=0,
                  max_tokens=120)
        whole = no_parser.chat.completions.create(model="demo", **kw).choices[0]
        assert whole.finish_reason == "tool_calls" and not whole.message.content
        calls = [(c.function.name, c.function.arguments) for c in whole.message.tool_calls]
        assert len(calls) == 1 and calls[0][0] in names and validate(json.loads(calls[0][1]), WEATHER) == []
        assert _streamed(no_parser, **kw) == (calls, "tool_calls")
    # parallel calls: the list goes on (this model repeats its call until max_tokens)
    r = no_parser.chat.completions.create(model="demo", messages=ask, tools=TOOLS, tool_choice="required",
                                          temperature=0, max_tokens=60)
    assert len(r.choices[0].message.tool_calls) >= 2
