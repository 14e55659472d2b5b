"""A tiktoken-format BPE directory (Kimi K2's layout: tiktoken.model, tokenization_kimi.py with
its pat_str, tokenizer_config.json with special tokens and chat template) loads into Tokenizer
and encodes exactly as tiktoken does."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from tandem.errors import ModelLoadError
from tandem.testing.corpus import corpus_lines
from tandem.tokenization.tokenizer import Tokenizer

tiktoken = pytest.importorskip("tiktoken")
from tiktoken._educational import bpe_train  # noqa: E402

# Kimi K2's pre-tokenizing regex (tokenization_kimi.py, TikTokenTokenizer.pat_str)
KIMI_PARTS = [
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
]
PAT = "|".join(KIMI_PARTS)
SPECIALS = {0: "[BOS]", 1: "[EOS]", 3: "<|im_end|>", 4: "<|im_user|>", 5: "<|im_assistant|>",
            7: "<|im_system|>", 8: "<|im_middle|>"}
TEMPLATE = ("{% for m in messages %}<|im_{{ m.role }}|>{{ m.role }}<|im_middle|>{{ m.content }}<|im_end|>"
            "{% endfor %}{% if add_generation_prompt %}<|im_assistant|>assistant<|im_middle|>{% endif %}")
SAMPLES = ["Hello WORLD, it's 12345 tokens!", "中文字符和English混合 ok", "  leading\n\n\ttabs  and spaces   ",
           "ÉCOLE école CAFÉ's naïve", "get_weather(city='Paris') -> {\"t\": 21.5}\r\n", "a" * 50,
           "emoji 🙂 and bytes \x00\x01 end", "The model returns the result quickly today."]


@pytest.fixture(scope="module")
def kimi_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("kimi")
    text = "\n".join(corpus_lines(300, seed=3)) + "\n" + "\n".join(SAMPLES[:5])
    ranks = bpe_train(text, 400, PAT)
    (d / "tiktoken.model").write_text("".join(f"{base64.b64encode(t).decode()} {r}\n"
                                              for t, r in sorted(ranks.items(), key=lambda x: x[1])))
    (d / "tokenization_kimi.py").write_text(
        "import tiktoken\n\nclass TikTokenTokenizer:\n    pat_str = \"|\".join(\n        [\n"
        + "".join(f"            r\"\"\"{p}\"\"\",\n" for p in KIMI_PARTS) + "        ]\n    )\n")
    n = len(ranks)
    config = {"added_tokens_decoder": {str(n + i): {"content": c, "special": True} for i, c in SPECIALS.items()},
              "bos_token": "[BOS]", "eos_token": "<|im_end|>", "chat_template": TEMPLATE,
              "tokenizer_class": "TikTokenTokenizer",
              "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]}}
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    return d, ranks


def _reference(ranks):
    n = len(ranks)
    specials = {f"<|reserved_token_{n + i}|>": n + i for i in range(256)}
    specials.update({c: n + i for i, c in SPECIALS.items()})
    return tiktoken.Encoding("kimi-test", pat_str=PAT, mergeable_ranks=ranks, special_tokens=specials)


def test_encodes_as_tiktoken_does(kimi_dir):
    d, ranks = kimi_dir
    tok, ref = Tokenizer.from_dir(d), _reference(ranks)
    for text in SAMPLES + ["\n".join(corpus_lines(20, seed=9))]:
        assert tok.encode(text, add_special_tokens=False) == ref.encode(text, disallowed_special=()), text
        assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


def test_special_tokens_ids_and_chat_template(kimi_dir):
    d, ranks = kimi_dir
    tok, n = Tokenizer.from_dir(d), len(ranks)
    assert tok.bos_token_id == n and tok.eos_token_ids[0] == n + 3
    assert tok.token_to_id("<|reserved_token_%d|>" % (n + 2)) == n + 2
    assert tok.vocab_size == n + 256
    prompt = tok.apply_chat_template([{"role": "user", "content": "中文 hi"}])
    ids = tok.encode_prompt(prompt)
    assert ids == _reference(ranks).encode(prompt, allowed_special="all")
    assert ids[0] == n + 4 and n + 5 in ids
    assert tok.decode(ids, skip_special_tokens=True) == "user中文 hiassistant"


def test_missing_pattern_is_a_clear_error(kimi_dir, tmp_path):
    d, _ = kimi_dir
    for f in ("tiktoken.model", "tokenizer_config.json"):
        (tmp_path / f).write_bytes((d / f).read_bytes())
    with pytest.raises(ModelLoadError, match="pat_str"):
        Tokenizer.from_dir(tmp_path)
    (tmp_path / "tiktoken.model").unlink()
    with pytest.raises(ModelLoadError, match=r"tokenizer.json\) or a tiktoken BPE"):
        Tokenizer.from_dir(tmp_path)
