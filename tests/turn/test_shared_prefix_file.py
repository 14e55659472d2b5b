"""The shared-prefix file: what parses, what is refused (naming the file and the entry), and each
kind of declaration rendered as the route it matches renders a prompt."""

from __future__ import annotations

import orjson
import pytest

from tandem.kv.shared_prefixes import SharedPrefixes
from tandem.tokenization.chat_prompt import render_chat
from tandem.tokenization.tokenizer import Tokenizer
from tandem.turn.chat_request import normalize_messages
from tandem.turn.shared_prefix_file import parse_shared_prefixes, render_shared_prefix

SYSTEM = {"role": "system", "content": "You are the support agent of Acme. Be brief and polite."}
TOOLS = [{"type": "function", "function": {"name": "get_order", "parameters": {
    "type": "object", "properties": {"id": {"type": "string"}}}}}]


def parse(doc) -> tuple:
    return parse_shared_prefixes(doc if isinstance(doc, str) else orjson.dumps(doc).decode(), "p.json")


def test_each_kind_parses():
    decls = parse({"prefixes": [{"name": "support", "messages": [SYSTEM], "tools": TOOLS},
                                {"text": "Answer in one line.\n"}, {"token_ids": [1, 2, 3]}]})
    assert [d.source for d in decls] == [f"--shared-prefixes p.json prefixes[{i}]" for i in range(3)]
    assert decls[0].name == "support" and decls[0].messages == [SYSTEM] and decls[0].tools == TOOLS
    assert decls[1].text == "Answer in one line.\n" and decls[2].token_ids == (1, 2, 3)


@pytest.mark.parametrize("doc,says", [
    ("{not json", "p.json: not JSON"),
    ("", "p.json: not JSON"),
    ([], "must be a JSON object with one key"),
    ({"prefix": []}, "must be a JSON object with one key"),
    ({"prefixes": []}, "\"prefixes\" must be a non-empty array"),
    ({"prefixes": {}}, "\"prefixes\" must be a non-empty array"),
    ({"prefixes": ["x"]}, "prefixes[0]: must be an object"),
    ({"prefixes": [{}]}, "prefixes[0]: needs exactly one of"),
    ({"prefixes": [{"text": "a", "token_ids": [1]}]}, "prefixes[0]: needs exactly one of"),
    ({"prefixes": [{"text": "a"}, {"txt": "b"}]}, "prefixes[1]: unknown keys ['txt']"),
    ({"prefixes": [{"text": ""}]}, "prefixes[0].text: must be a non-empty string"),
    ({"prefixes": [{"text": "a", "tools": TOOLS}]}, "\"tools\" go with \"messages\" only"),
    ({"prefixes": [{"token_ids": []}]}, "prefixes[0].token_ids: must be a non-empty array"),
    ({"prefixes": [{"token_ids": [1, -2]}]}, "prefixes[0].token_ids"),
    ({"prefixes": [{"token_ids": [True]}]}, "prefixes[0].token_ids"),
    ({"prefixes": [{"messages": []}]}, "prefixes[0]: 'messages' must be a non-empty array"),
    ({"prefixes": [{"messages": [{"role": "boss", "content": "x"}]}]}, "prefixes[0]: 'messages[0].role'"),
    ({"prefixes": [{"messages": [SYSTEM], "tools": [{"type": "function"}]}]}, "prefixes[0]:"),
    ({"prefixes": [{"text": "a", "name": 3}]}, "prefixes[0].name: must be a string"),
])
def test_bad_files_are_refused_naming_the_file_and_the_entry(doc, says):
    with pytest.raises(ValueError) as info:
        parse(doc)
    assert says in str(info.value)
    assert str(info.value).startswith("--shared-prefixes p.json")


def test_declarations_render_as_the_routes_render_prompts(llama_dir):
    tok = Tokenizer.from_dir(llama_dir)
    chat, text, ids = parse({"prefixes": [{"messages": [SYSTEM], "tools": TOOLS},
                                          {"text": "Answer in one line.\n"}, {"token_ids": [5, 6]}]})
    # chat: a request with the same system prompt and tools, then its own question, starts with
    # every token of the declaration
    declared = render_shared_prefix(chat, tok)
    asked = render_chat(tok, normalize_messages([SYSTEM, {"role": "user", "content": "Where is my order?"}]),
                        TOOLS)
    assert len(declared) > 16 and SharedPrefixes((declared,)).match(asked) == len(declared)
    # without the tools it is another prompt: the match stops where they would have been
    bare = render_chat(tok, normalize_messages([SYSTEM, {"role": "user", "content": "Hi"}]), None)
    assert SharedPrefixes((declared,)).match(bare) < len(declared)
    # text: as the completions route tokenizes a prompt (special tokens included)
    assert render_shared_prefix(text, tok) == tuple(tok.encode("Answer in one line.\n", add_special_tokens=True))
    assert render_shared_prefix(ids, tok) == (5, 6)
