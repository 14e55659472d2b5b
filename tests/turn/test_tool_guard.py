"""The tool-call guard: with no tools or tool_choice "none", the format's call opening cannot be
written, as one token or spelled in several; each chat route carries it; a request with tools
still calls. The live tests push a random-weight model towards the opening with logit_bias."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from tandem.api.app import build_app
from tandem.api.config import ServerConfig
from tandem.engine.async_engine import AsyncEngine
from tandem.engine.engine import Engine
from tandem.grammar.compiler import GrammarCompiler
from tandem.testing.tiny_model import write_test_model
from tandem.tokenization.tokenizer import Tokenizer
from tandem.turn.tool_guard import call_openings, no_calls_grammar
from tests.conftest import IN_PROCESS_GRAMMARS, engine_config
from tests.api.fakes import FakeBackend


@pytest.mark.parametrize("parser,template,openings", [
    ("hermes", None, ("<tool_call>",)),
    ("qwen3_coder", None, ("<tool_call>", "<function=")),
    ("mistral", None, ("[TOOL_CALLS]",)),
    ("deepseek_v3", "```json", ("<｜tool▁call▁begin｜>", "<｜tool▁calls▁begin｜>")),
    ("kimi_k2", None, ("<|tool_call_begin|>", "<|tool_calls_section_begin|>")),
    ("llama3_json", None, ("<|python_tag|>",)),   # not `{"name"`: plain JSON answers open so too
])
def test_openings_are_what_each_parser_reads_as_a_call(parser, template, openings):
    assert call_openings(parser, template) == openings


def test_the_opening_is_refused_as_a_string_and_its_pieces_stay_free(llama_dir):
    tok = Tokenizer.from_dir(llama_dir)   # `<tool_call>` is one added token here
    compiler = GrammarCompiler(tok.backend, tok.backend.get_vocab_size(), tok.eos_token_ids, IN_PROCESS_GRAMMARS)
    guard = no_calls_grammar(("<tool_call>", "[TOOL_CALLS]"))

    def accepts(*texts: str, end: bool = False) -> bool:
        grammar = compiler.matcher(guard)
        ids = [t for text in texts for t in tok.encode(text, add_special_tokens=False)]
        return all(grammar.accept(t) for t in ids + ([tok.eos_token_ids[0]] if end else []))

    assert tok.encode("<tool_call>", add_special_tokens=False) == [tok.backend.token_to_id("<tool_call>")]
    assert accepts("Plain answer: <tool and _call>, [TOOL CALLS], naïve 東京 {\"name\": 1}", end=True)
    assert not accepts("Sure. <tool_call>")                      # the added token
    assert not accepts("Sure. <", "tool", "_", "call", ">")       # spelled in pieces
    assert not accepts("x[TOOL_CALLS]")
    assert accepts("[TOOL_CALL", "S")                          # a prefix, then something else
    assert accepts("", end=True)                               # a stop token ends it anywhere


# --- every chat route carries it -------------------------------------------------------------------

GUARD = {"type": "any_text", "excludes": ["<tool_call>"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
ROUTES = [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}),
    ("/v1/responses", {"input": "hi", "max_output_tokens": 5}),
    ("/v1/messages", {"model": "fake-model", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}),
    ("/client/v4/accounts/a/ai/run/@cf/meta/fake-model", {"messages": [{"role": "user", "content": "hi"}],
                                                         "max_tokens": 5}),
]


@pytest.mark.parametrize("path,body", ROUTES)
def test_every_chat_route_guards_unless_turned_off(path, body):
    for guard in (True, False):
        backend = FakeBackend(reply="ok")
        with TestClient(build_app(backend, ServerConfig(tool_call_parser="hermes",
                                                        tool_call_guard=guard))) as client:
            assert client.post(path, json=body).status_code == 200
            grammar = backend.seen[-1].sampling.grammar
            assert (json.loads(grammar.text)["format"] == GUARD) if guard else grammar is None


def test_completions_and_requests_that_may_call_are_not_guarded():
    backend = FakeBackend(reply="ok")
    with TestClient(build_app(backend, ServerConfig(tool_call_parser="hermes"))) as client:
        client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 3})
        assert backend.seen[-1].sampling.grammar is None
        client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                  "tools": TOOLS, "max_tokens": 3})
        assert json.loads(backend.seen[-1].sampling.grammar.text)["format"]["type"] == "triggered_tags"
        # Workers AI's raw prompt is the client's own template: its output is the client's to read
        client.post(ROUTES[3][0], json={"prompt": "<|im_start|>user\nhi", "raw": True, "max_tokens": 3})
        assert backend.seen[-1].sampling.grammar is None
    backend = FakeBackend(reply="ok")
    with TestClient(build_app(backend, ServerConfig(tool_call_parser="none"))) as client:
        client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
        assert backend.seen[-1].sampling.grammar is None


# --- a real engine pushed towards the opening ------------------------------------------------------

def _model_with(tmp_path_factory, renames: dict[str, tuple[str, bool]]):
    """The tiny test model with some of its added tokens renamed: {old: (new, special)}."""
    path = write_test_model(tmp_path_factory.mktemp("guard-model"))
    tok = json.loads((path / "tokenizer.json").read_text())
    for entry in tok["added_tokens"]:
        if entry["content"] in renames:
            entry["content"], entry["special"] = renames[entry["content"]]
    (path / "tokenizer.json").write_text(json.dumps(tok))
    cfg = json.loads((path / "tokenizer_config.json").read_text())
    for entry in cfg["added_tokens_decoder"].values():
        if entry["content"] in renames:
            entry["content"], entry["special"] = renames[entry["content"]]
    (path / "tokenizer_config.json").write_text(json.dumps(cfg))
    return path


@pytest.fixture(scope="module")
def one_token(tmp_path_factory):
    """`[TOOL_CALLS]` is one special token."""
    return _model_with(tmp_path_factory, {"<tool_response>": ("[TOOL_CALLS]", True)})


@pytest.fixture(scope="module")
def two_tokens(tmp_path_factory):
    """`[TOOL_CALLS]` is written `[TOOL` `_CALLS]`."""
    return _model_with(tmp_path_factory, {"<tool_response>": ("[TOOL", False),
                                          "</tool_response>": ("_CALLS]", False)})


def _live(model_dir, guard: bool) -> tuple[TestClient, AsyncEngine]:
    config = engine_config(model_dir, num_blocks=96)
    front = AsyncEngine(config, engine=Engine.from_config(config))
    app = build_app(front, ServerConfig(served_model_name="m", tool_call_parser="mistral", tool_call_guard=guard),
                    startup=front.start, shutdown=front.shutdown)
    return TestClient(app), front


CITY = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 6}}, "required": ["city"],
    "additionalProperties": False}}}]


def _chat(client, **body) -> dict:
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "What is 2 + 2?"}],
                                                  "skip_special_tokens": False, **body})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def test_one_special_token_opening(one_token):
    opening = str(Tokenizer.from_dir(one_token).backend.token_to_id("[TOOL_CALLS]"))
    push = {"logit_bias": {opening: 100}, "temperature": 0, "max_tokens": 6}
    client, _ = _live(one_token, guard=False)
    with client:
        assert _chat(client, **push)["message"]["content"] == "[TOOL_CALLS]" * 6
    client, _ = _live(one_token, guard=True)
    with client:
        for extra in ({}, {"tools": CITY, "tool_choice": "none"}):
            choice = _chat(client, **push, **extra)
            assert "[TOOL_CALLS]" not in choice["message"]["content"] and "tool_calls" not in choice["message"]
        # offered tools: the same push opens a call, which comes back parsed
        choice = _chat(client, **{**push, "max_tokens": 60}, tools=CITY, parallel_tool_calls=False)
        assert choice["finish_reason"] == "tool_calls"
        assert [c["function"]["name"] for c in choice["message"]["tool_calls"]] == ["get_weather"]
        # past an ignored stop token the output is free (ignore_eos), and nothing breaks
        eos = str(Tokenizer.from_dir(one_token).eos_token_ids[0])
        choice = _chat(client, logit_bias={eos: 100}, ignore_eos=True, max_tokens=5, temperature=0)
        assert choice["finish_reason"] == "length"


def test_several_token_opening_is_refused_as_a_sequence(two_tokens):
    tok = Tokenizer.from_dir(two_tokens)
    assert len(tok.encode("[TOOL_CALLS]", add_special_tokens=False)) == 2
    pieces = {str(tok.backend.token_to_id(p)): 100 for p in ("[TOOL", "_CALLS]")}
    push = {"logit_bias": pieces, "temperature": 1, "max_tokens": 24}
    seeds = (1, 2, 3)
    client, _ = _live(two_tokens, guard=False)
    with client:
        assert all("[TOOL_CALLS]" in _chat(client, **push, seed=s)["message"]["content"] for s in seeds)
    client, _ = _live(two_tokens, guard=True)
    with client:
        texts = [_chat(client, **push, seed=s)["message"]["content"] for s in seeds]
        assert not any("[TOOL_CALLS]" in t for t in texts), texts
        assert all("[TOOL" in t for t in texts), texts   # the pieces stay free
        tail = {str(tok.backend.token_to_id("_CALLS]")): 100}
        assert _chat(client, logit_bias=tail, temperature=0, max_tokens=3)["message"]["content"] == "_CALLS]" * 3
        choice = _chat(client, **{**push, "max_tokens": 80}, seed=1, tools=CITY, parallel_tool_calls=False)
        assert choice["finish_reason"] == "tool_calls", choice
        assert [c["function"]["name"] for c in choice["message"]["tool_calls"]] == ["get_weather"]
