from __future__ import annotations

import json

import pytest

from tandem_demo.chat_template import DEFAULT_SYSTEM, compile_template, render
from tandem_demo.tokenizer_train import save_tokenizer_files, train_tokenizer
from tandem_demo.tools import tool_catalog

TOOLS = tool_catalog()[:3]
CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
CONVERSATIONS = [
    ([{"role": "user", "content": "Hi"}], None),
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], None),
    ([{"role": "user", "content": "Weather in Paris?"}], TOOLS),
    ([{"role": "system", "content": "S"}, {"role": "user", "content": "Weather in Paris and Rome?"},
      {"role": "assistant", "content": "", "tool_calls": [CALL, CALL]},
      {"role": "tool", "content": "{\"t\": 1}"}, {"role": "tool", "content": "{\"t\": 2}"},
      {"role": "assistant", "content": "Warm."}], TOOLS),
    # OpenAI clients send arguments as a JSON string, and may put text before the call
    ([{"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": "Checking.", "tool_calls": [
          {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]}],
     TOOLS),
]


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tmpl")
    save_tokenizer_files(train_tokenizer(["hello world " * 50], vocab_size=300), path)
    return path


def test_tools_and_calls_render_in_hermes_style():
    text = render(compile_template(), *CONVERSATIONS[3])
    assert "<tools>\n" + json.dumps(TOOLS[0]["function"]) + "\n" in text
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    assert f"<|im_start|>assistant\n{call}\n{call}<|im_end|>\n" in text
    assert "<|im_start|>user\n<tool_response>\n{\"t\": 1}\n</tool_response>\n<tool_response>\n{\"t\": 2}\n" \
           "</tool_response><|im_end|>\n" in text
    text = render(compile_template(), *CONVERSATIONS[4], add_generation_prompt=True)
    assert 'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>' in text
    assert text.endswith("<|im_start|>assistant\n")


def test_default_system_prompt_when_none_given():
    assert render(compile_template(), *CONVERSATIONS[0]) == \
        f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    assert render(compile_template(), *CONVERSATIONS[2]).startswith(f"<|im_start|>system\n{DEFAULT_SYSTEM}\n\n# Tools")


@pytest.mark.parametrize("gen", [False, True])
def test_transformers_renders_the_same(tok_dir, gen):
    transformers = pytest.importorskip("transformers")
    t = transformers.AutoTokenizer.from_pretrained(str(tok_dir))
    for messages, tools in CONVERSATIONS:
        assert t.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=gen) == \
            render(compile_template(), messages, tools, add_generation_prompt=gen)


def test_tandem_tokenizer_renders_the_same(tok_dir):
    tokenizer = pytest.importorskip("tandem.tokenization.tokenizer")
    t = tokenizer.Tokenizer.from_dir(tok_dir)
    for messages, tools in CONVERSATIONS:
        assert t.apply_chat_template(messages, tools=tools, add_generation_prompt=True) == \
            render(compile_template(), messages, tools, add_generation_prompt=True)
