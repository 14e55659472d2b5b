"""--chat-template: a file or the template itself, replacing the model's own templates."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tandem.errors import ChatTemplateError
from tandem.testing.tiny_model import write_test_model
from tandem.tokenization.chat_template_arg import chat_template_arg, chat_template_flag, read_chat_template
from tandem.tokenization.tokenizer import Tokenizer

TEMPLATE = ("{% for m in messages %}<<{{ m.role }}>>{{ m.content }}\n{% endfor %}"
            "{% if add_generation_prompt %}<<assistant>>{% endif %}")
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


def test_a_file_or_the_template_itself(tmp_path):
    f = tmp_path / "t.jinja"
    f.write_text(TEMPLATE)
    assert read_chat_template(str(f)) == TEMPLATE
    assert chat_template_arg(str(f)) == TEMPLATE
    assert chat_template_arg(TEMPLATE) == TEMPLATE            # inline, as vLLM takes it
    assert chat_template_arg("x" * 5000 + "{{ x }}") .endswith("{{ x }}")   # longer than a file name
    with pytest.raises(argparse.ArgumentTypeError, match="no such file"):
        chat_template_arg(str(tmp_path / "missing.jinja"))
    (tmp_path / "empty.jinja").write_text("  \n")
    with pytest.raises(argparse.ArgumentTypeError, match="empty"):
        chat_template_arg(str(tmp_path / "empty.jinja"))


def test_passed_on_as_an_absolute_path_or_inline(tmp_path, monkeypatch):
    (tmp_path / "t.jinja").write_text(TEMPLATE)
    monkeypatch.chdir(tmp_path)
    assert chat_template_flag("t.jinja") == (f"--chat-template={tmp_path / 't.jinja'}",)
    assert chat_template_flag(TEMPLATE) == (f"--chat-template={TEMPLATE}",)
    assert chat_template_flag(None) == ()


def test_it_replaces_every_template_of_the_model(tmp_path):
    model = write_test_model(tmp_path / "m", "LlamaForCausalLM")
    extra = Path(model) / "additional_chat_templates"
    extra.mkdir()
    (extra / "tool_use.jinja").write_text("TOOLS {{ messages | length }}")
    own = Tokenizer.from_dir(model)
    assert set(own.chat_templates) == {"default", "tool_use"}
    tok = Tokenizer.from_dir(model, TEMPLATE)
    assert tok.chat_templates == {"default": TEMPLATE}
    text = "<<system>>Be brief.\n<<user>>Hi\n<<assistant>>"
    assert tok.apply_chat_template(CHAT) == text
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    assert tok.apply_chat_template(CHAT, tools=tools) == text    # the named tool_use one is gone too


def test_a_model_without_a_template_names_the_option(tmp_path):
    model = write_test_model(tmp_path / "m", "LlamaForCausalLM")
    (Path(model) / "chat_template.jinja").unlink()
    with pytest.raises(ChatTemplateError, match="--chat-template"):
        Tokenizer.from_dir(model).apply_chat_template(CHAT)
    assert Tokenizer.from_dir(model, TEMPLATE).apply_chat_template(CHAT).startswith("<<system>>")
