"""Tokenizer and chat template agree with transformers' AutoTokenizer on the same directory."""

from __future__ import annotations

import json

import pytest

from tandem.errors import ModelLoadError
from tandem.tokenization.chat_template import ChatTemplateError
from tandem.tokenization.tokenizer import Tokenizer
from tandem.testing.tiny_model import write_test_model

transformers = pytest.importorskip("transformers")

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city, ünïcode & <tags>",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}},
]
CONVERSATIONS = [
    [{"role": "user", "content": "Hello there!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2 + 2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3 + 3?"}],
    [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Weather in Paris?"},
     {"role": "assistant", "content": None, "tool_calls": [
         {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
         {"id": "c2", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}]},
     {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21 C"},
     {"role": "tool", "tool_call_id": "c2", "content": "1"},
     {"role": "assistant", "content": "It is sunny."},
     {"role": "user", "content": [{"type": "text", "text": "Thanks"}, {"type": "text", "text": "!"}]}],
]
TEXTS = ["Hello world", "  spaces   and\ttabs\n", "ünïcödé ✓ 日本", "<|im_start|>user\nhi<|im_end|>",
         "<tool_call>\n{\"name\": \"x\"}\n</tool_call>", ""]


@pytest.fixture(scope="module", params=["LlamaForCausalLM", "Qwen3ForCausalLM"])
def model_dir(request, tmp_path_factory):
    return write_test_model(tmp_path_factory.mktemp(request.param), request.param)


@pytest.fixture(scope="module")
def pair(model_dir):
    return Tokenizer.from_dir(model_dir), transformers.AutoTokenizer.from_pretrained(str(model_dir))


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("special", [True, False])
def test_encode_decode_match(pair, text, special):
    ours, hf = pair
    ids = ours.encode(text, add_special_tokens=special)
    assert ids == hf.encode(text, add_special_tokens=special)
    assert ours.decode(ids) == hf.decode(ids, skip_special_tokens=True)
    assert ours.decode(ids, skip_special_tokens=False) == hf.decode(ids, skip_special_tokens=False)
    assert ours.convert_ids_to_tokens(ids) == hf.convert_ids_to_tokens(ids)


def test_special_tokens(pair):
    ours, hf = pair
    assert ours.bos_token_id == hf.bos_token_id
    assert ours.eos_token_ids[0] == hf.eos_token_id
    assert ours.token_to_id("<|im_end|>") in ours.eos_token_ids
    assert ours.vocab_size == len(hf)


@pytest.mark.parametrize("conv", range(len(CONVERSATIONS)))
@pytest.mark.parametrize("tools", [None, TOOLS])
@pytest.mark.parametrize("gen_prompt", [True, False])
def test_chat_template_matches(pair, conv, tools, gen_prompt):
    ours, hf = pair
    messages = CONVERSATIONS[conv]
    text = ours.apply_chat_template(messages, tools=tools, add_generation_prompt=gen_prompt)
    assert text == hf.apply_chat_template(messages, tools=tools, add_generation_prompt=gen_prompt, tokenize=False)
    assert ("<tools>" in text) == bool(tools)
    if conv == 2:
        assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text


def test_template_raise_exception(pair):
    ours, _ = pair
    with pytest.raises(ChatTemplateError, match="only the first message may have role system") as e:
        ours.apply_chat_template([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}])
    assert e.value.status == 400 and e.value.param == "messages"


def test_template_in_tokenizer_config(tmp_path):
    path = write_test_model(tmp_path, "Qwen2ForCausalLM", chat_template_in_config=True)
    assert not (path / "chat_template.jinja").exists()
    assert "chat_template" in json.loads((path / "tokenizer_config.json").read_text())
    ours, hf = Tokenizer.from_dir(path), transformers.AutoTokenizer.from_pretrained(str(path))
    for messages in CONVERSATIONS:
        assert ours.apply_chat_template(messages, tools=TOOLS) == hf.apply_chat_template(
            messages, tools=TOOLS, add_generation_prompt=True, tokenize=False)


PLAIN = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
WITH_TOOLS = "[{% for t in tools %}{{ t.function.name }};{% endfor %}]" + PLAIN


@pytest.mark.parametrize("layout", ["list_in_config", "additional_files"])
def test_named_templates_tool_use_renders_requests_with_tools(tmp_path, layout):
    path = write_test_model(tmp_path, "Qwen2ForCausalLM", chat_template_in_config=layout == "list_in_config")
    cfg_file = path / "tokenizer_config.json"
    if layout == "list_in_config":  # as Hermes 2 Pro and older Mistral checkpoints ship it
        cfg = json.loads(cfg_file.read_text())
        cfg["chat_template"] = [{"name": "default", "template": PLAIN}, {"name": "tool_use", "template": WITH_TOOLS}]
        cfg_file.write_text(json.dumps(cfg))
    else:  # as transformers saves several templates
        (path / "chat_template.jinja").write_text(PLAIN)
        (path / "additional_chat_templates").mkdir()
        (path / "additional_chat_templates" / "tool_use.jinja").write_text(WITH_TOOLS)
    ours, hf = Tokenizer.from_dir(path), transformers.AutoTokenizer.from_pretrained(str(path))
    messages = CONVERSATIONS[0]
    for tools in (None, TOOLS):
        want = hf.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
        assert ours.apply_chat_template(messages, tools=tools) == want
    assert ours.apply_chat_template(messages, tools=TOOLS).startswith("[get_weather;add;]<user>")
    assert ours.apply_chat_template(messages).startswith("<user>")


def test_sandbox_blocks_escapes(tmp_path):
    path = write_test_model(tmp_path)
    (path / "chat_template.jinja").write_text("{{ messages.__class__.__mro__ }}")
    with pytest.raises(ChatTemplateError):
        Tokenizer.from_dir(path).apply_chat_template([{"role": "user", "content": "x"}])
    (path / "chat_template.jinja").write_text("{% set _ = messages.append(1) %}{{ messages | length }}")
    with pytest.raises(ChatTemplateError):
        Tokenizer.from_dir(path).apply_chat_template([{"role": "user", "content": "x"}])


def test_missing_tokenizer_json(tmp_path):
    path = write_test_model(tmp_path)
    (path / "tokenizer.json").unlink()
    with pytest.raises(ModelLoadError, match="tokenizer.json"):
        Tokenizer.from_dir(path)


def test_template_that_does_not_parse_fails_the_chat_request_not_the_load(tmp_path):
    """Completions still work with a broken template; a chat request gets a 400-class error."""
    path = write_test_model(tmp_path)
    (path / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }")
    tok = Tokenizer.from_dir(path)
    assert tok.encode("hello")
    with pytest.raises(ChatTemplateError, match="does not parse"):
        tok.apply_chat_template([{"role": "user", "content": "x"}])


def test_warm_chat_template_compiles_once_and_logs_a_broken_one(tmp_path, caplog):
    from tandem.tokenization.tokenizer import warm_chat_template

    tok = Tokenizer.from_dir(write_test_model(tmp_path / "ok"))
    warm_chat_template(tok)
    compiled = tok.compiled_chat_template()
    assert compiled is tok.compiled_chat_template()  # compiled at warm-up, reused
    assert tok._prompt_encoder is not None and "default" in tok._loops_over_content  # made at warm-up
    broken_dir = write_test_model(tmp_path / "broken")
    (broken_dir / "chat_template.jinja").write_text("{% if %}")
    broken = Tokenizer.from_dir(broken_dir)
    warm_chat_template(broken)  # no exception: completions still work
    assert "chat completions will fail" in caplog.text
    with pytest.raises(ChatTemplateError):
        broken.apply_chat_template([{"role": "user", "content": "x"}])


# A template written to probe what transformers hands templates: which variables are defined,
# a field sent as null, the reasoning names, the {% generation %} tag of training templates.
PROBE_TEMPLATE = (
    "[bos={{ bos_token if bos_token is defined else 'undef' }}|pad={{ pad_token is defined }}"
    "|docs={{ documents is defined }}]"
    "{% for m in messages %}<{{ m.role }}"
    "{% if m.tool_calls is defined %} calls={{ m.tool_calls | length }}{% endif %}"
    "{% if m.reasoning_content is defined %} rc={{ m.reasoning_content }}{% endif %}"
    "{% if m.thinking is defined %} th={{ m.thinking }}{% endif %}>"
    "{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}"
    "{% else %}{{ m.content }}{% endif %}{% endfor %}")


def test_template_variables_and_messages_as_transformers_gives_them(tmp_path):
    from tandem.turn.chat_request import normalize_messages

    path = write_test_model(tmp_path, "Qwen3ForCausalLM")
    (path / "chat_template.jinja").write_text(PROBE_TEMPLATE)
    cfg = json.loads((path / "tokenizer_config.json").read_text())
    cfg["bos_token"] = None  # as Qwen's tokenizers: no BOS at all
    (path / "tokenizer_config.json").write_text(json.dumps(cfg))
    ours, hf = Tokenizer.from_dir(path), transformers.AutoTokenizer.from_pretrained(str(path))
    sent = [{"role": "user", "content": "hi", "name": None},
            # an assistant message echoed back by a client: null fields, reasoning under vLLM's name
            {"role": "assistant", "content": "ok", "tool_calls": None, "refusal": None,
             "reasoning": "think first"},
            {"role": "user", "content": "bye"}]
    hf_view = [{"role": "user", "content": "hi"},
               {"role": "assistant", "content": "ok", "reasoning_content": "think first"},
               {"role": "user", "content": "bye"}]
    text = ours.apply_chat_template(normalize_messages(sent), add_generation_prompt=False)
    assert text == hf.apply_chat_template(hf_view, tokenize=False)
    assert text.startswith("[bos=undef|pad=True|docs=True]") and "calls=" not in text
    assert "<assistant rc=think first th=think first>ok" in text


def test_python_errors_inside_a_template_are_template_errors(tmp_path):
    path = write_test_model(tmp_path)
    (path / "chat_template.jinja").write_text("{{ messages[0].tool_calls | length }}")
    with pytest.raises(ChatTemplateError, match="TypeError"):
        Tokenizer.from_dir(path).apply_chat_template([{"role": "user", "content": "x", "tool_calls": None}])
    (path / "chat_template.jinja").write_text("{% set ns = namespace(_hidden=1) %}{{ ns._hidden }}")
    with pytest.raises(ChatTemplateError, match="not allowed"):
        Tokenizer.from_dir(path).apply_chat_template([{"role": "user", "content": "x"}])


@pytest.mark.parametrize("source,loops", [
    ("{% for message in messages %}{% for part in message['content'] %}{{ part.text }}{% endfor %}{% endfor %}", True),
    ("{% for m in loop_messages %}{% set c = m.content %}"
     "{% for p in c | selectattr('type', 'equalto', 'text') %}{{ p.text }}{% endfor %}{% endfor %}", True),
    ("{% for m in messages[1:] %}{% for x in m['content'] %}{{ x['text'] }}{% endfor %}{% endfor %}", True),
    ("{% for message in messages %}{% if message.content is string %}{{ message.content }}{% endif %}"
     "{% endfor %}", False),
    ("{% for tool in tools %}{% for p in tool.content %}{% endfor %}{% endfor %}", False),
    ("{% for message in messages %}{{ message.content", False),  # does not parse
])
def test_content_format_detection(source, loops):
    from tandem.tokenization.chat_template import loops_over_content

    assert loops_over_content(source) is loops


PARTS_TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message.role }}\n"
                  "{% if message.content is string %}{{ message.content }}"
                  "{% else %}{% for part in message.content %}[{{ part.text | trim }}]{% endfor %}{% endif %}"
                  "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_text_parts_reach_a_template_that_reads_parts_and_are_joined_for_others(tmp_path):
    from tandem.turn.chat_request import normalize_messages
    from tandem.tokenization.chat_prompt import render_chat

    sent = [{"role": "user", "content": [{"type": "text", "text": " Part one. "},
                                         {"type": "text", "text": "Part two."}]}]
    reads_parts = write_test_model(tmp_path / "parts", "Qwen3ForCausalLM")
    (reads_parts / "chat_template.jinja").write_text(PARTS_TEMPLATE)
    ours = Tokenizer.from_dir(reads_parts)
    hf = transformers.AutoTokenizer.from_pretrained(str(reads_parts))
    assert ours.content_as_parts
    want = hf.apply_chat_template(sent, add_generation_prompt=True, tokenize=False)
    assert "[Part one.][Part two.]" in want
    assert ours.decode(render_chat(ours, normalize_messages(sent), None), skip_special_tokens=False) == want

    joins = write_test_model(tmp_path / "string", "Qwen3ForCausalLM")
    ours = Tokenizer.from_dir(joins)
    assert not ours.content_as_parts
    text = ours.decode(render_chat(ours, normalize_messages(sent), None), skip_special_tokens=False)
    assert " Part one. \nPart two." in text
