from __future__ import annotations

import json

import pytest

from tandem_demo.corpus import CorpusConfig, build_corpus
from tandem_demo.tokenizer_train import (SPECIAL_TOKENS, TOOL_TOKENS, corpus_texts, save_tokenizer_files,
                                         train_tokenizer)

TEXTS = [
    "<|im_start|>user\nWhat's the weather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call><|im_end|>\n',
    "In the beginning God created the heaven and the earth. 1234567890 héllo ünïcode ✓ tabs\tand  spaces\n",
]


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory, bible_text):
    root = tmp_path_factory.mktemp("tok")
    build_corpus(root / "corpus", CorpusConfig(agent_train=40, agent_heldout=5), bible_text=bible_text)
    tok = train_tokenizer(corpus_texts(root / "corpus"), vocab_size=600)
    save_tokenizer_files(tok, root / "tokenizer")
    return root / "tokenizer", tok


def test_vocab_size_and_fixed_special_ids(tok_dir):
    _, tok = tok_dir
    assert tok.get_vocab_size() == 600
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2]
    assert [tok.token_to_id(t) for t in TOOL_TOKENS] == [596, 597, 598, 599]


def test_round_trip_and_atomic_markers(tok_dir):
    _, tok = tok_dir
    for text in TEXTS:
        ids = tok.encode(text).ids
        assert tok.decode(ids, skip_special_tokens=False) == text
        for marker in SPECIAL_TOKENS + TOOL_TOKENS:
            assert text.count(marker) == ids.count(tok.token_to_id(marker))
    # markers glued to other text still come out whole
    ids = tok.encode("x<tool_call>y</tool_call>z").ids
    assert tok.token_to_id("<tool_call>") in ids and tok.token_to_id("</tool_call>") in ids


def test_digits_are_single_tokens(tok_dir):
    _, tok = tok_dir
    assert tok.encode("2025").tokens == ["2", "0", "2", "5"]


def test_isolated_spaces_give_a_value_the_same_tokens_in_a_request_and_in_a_tool_call(tok_dir):
    tok = train_tokenizer(TEXTS * 20, vocab_size=400, isolate_spaces=True)
    for value in ("Paris", "alice.smith@acme.io", "electric cars", "37 * 12"):
        alone = tok.encode(value).ids
        for text in (f"What about {value}?", f'{{"arguments": {{"q": "{value}"}}}}', f"in {value} today"):
            ids = tok.encode(text).ids
            assert any(ids[i:i + len(alone)] == alone for i in range(len(ids))), (value, text)


def test_config_files(tok_dir):
    path, tok = tok_dir
    cfg = json.loads((path / "tokenizer_config.json").read_text())
    gen = json.loads((path / "generation_config.json").read_text())
    assert cfg["eos_token"] == "<|im_end|>" and cfg["chat_template"] == (path / "chat_template.jinja").read_text()
    assert gen["eos_token_id"] == [2, 0]
    assert cfg["added_tokens_decoder"]["597"] == {"content": "</tool_call>", "lstrip": False, "normalized": False,
                                                  "rstrip": False, "single_word": False, "special": False}


def test_transformers_loads_it_and_keeps_tool_markers(tok_dir):
    transformers = pytest.importorskip("transformers")
    path, _ = tok_dir
    t = transformers.AutoTokenizer.from_pretrained(str(path))
    assert t.eos_token_id == 2 and t.pad_token_id == 0
    ids = t(TEXTS[0], add_special_tokens=False)["input_ids"]
    text = t.decode(ids, skip_special_tokens=True)
    assert "<|im_start|>" not in text and "<tool_call>" in text and "</tool_call>" in text
