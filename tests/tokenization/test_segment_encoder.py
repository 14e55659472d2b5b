"""SegmentEncoder: a chat prompt tokenized piece by piece (pieces cached) gives exactly the ids
of tokenizing it whole, or the encoder stays off."""

import random
import threading

import pytest
from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers

from tandem.tokenization.segment_encoder import SegmentEncoder
from tandem.tokenization.tokenizer import Tokenizer as TandemTokenizer
from tandem.turn.chat_request import normalize_messages
from tandem.tokenization.chat_prompt import render_chat
from tandem.testing.tiny_tokenizer import trained_tokenizer_json
from tandem.testing.tiny_model import write_test_model

WORDS = ["hello", " world", "\n", "  ", "ünïcödé", "日本", "✓", "<tool_call>", "{\"a\": 1}", "\t",
         "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|bos|>", " x", "42", "\n\n"]


def random_texts(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(WORDS) for _ in range(rng.randint(0, 40))) for _ in range(n)]


@pytest.mark.parametrize("style", ["llama", "qwen"])
def test_pieces_give_the_ids_of_the_whole_text(style):
    backend = Tokenizer.from_str(trained_tokenizer_json(512, style))
    enc = SegmentEncoder(backend)
    assert enc.enabled
    for text in random_texts(1, 300) * 2:  # the second pass comes from the cache
        assert enc.encode(text) == backend.encode(text, add_special_tokens=False).ids, repr(text)


def test_chat_requests_tokenize_the_same_turn_after_turn(tmp_path):
    tok = TandemTokenizer.from_dir(write_test_model(tmp_path, "Qwen3ForCausalLM"))
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    messages = [{"role": "system", "content": "You are an agent."}]
    for turn, text in enumerate(random_texts(2, 12)):
        messages.append({"role": "user", "content": f"turn {turn}: {text}"})
        ids = render_chat(tok, normalize_messages(messages), tools)
        rendered = tok.apply_chat_template(normalize_messages(messages), tools=tools)
        assert ids == tok.encode(rendered, add_special_tokens=False)
        messages.append({"role": "assistant", "content": text[::-1]})
    assert tok._prompt_encoder.enabled


def test_a_first_piece_only_metaspace_turns_it_off():
    # sentencepiece style: the marker goes before the first piece only, so pieces differ
    backend = Tokenizer(models.WordLevel({"[UNK]": 0, "▁a": 1, "a": 2, "▁b": 3, "b": 4, "▁": 5},
                                         unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    backend.add_special_tokens([AddedToken("<s>", special=True, normalized=False)])
    enc = SegmentEncoder(backend)
    assert not enc.enabled
    for text in ["a<s>b", "<s>a b<s>a", "b"]:
        assert enc.encode(text) == backend.encode(text, add_special_tokens=False).ids


def test_no_separators_or_unsafe_ones_mean_plain_encoding():
    backend = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    assert not SegmentEncoder(backend).enabled
    backend.normalizer = normalizers.Lowercase()
    backend.add_special_tokens([AddedToken("<S>", special=True, normalized=True),
                                AddedToken("<t>", special=True, lstrip=True)])
    assert not SegmentEncoder(backend).enabled  # normalized and whitespace-stripping tokens are not cut at


def test_cache_is_bounded_and_thread_safe():
    backend = Tokenizer.from_str(trained_tokenizer_json(512, "qwen"))
    enc = SegmentEncoder(backend, capacity_chars=2000)
    texts = random_texts(3, 400)
    want = [backend.encode(t, add_special_tokens=False).ids for t in texts]
    errors: list[str] = []

    def worker(offset: int) -> None:
        for i in range(len(texts)):
            j = (i + offset) % len(texts)
            if enc.encode(texts[j]) != want[j]:
                errors.append(texts[j])

    threads = [threading.Thread(target=worker, args=(k * 97,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert enc._chars <= 2000 and sum(len(p) for p in enc._cache) == enc._chars


def test_a_token_that_could_straddle_a_cut_keeps_its_separator_out():
    # "x<|im" ends with the start of "<|im_start|>": in "x<|im_start|>" it is matched first
    backend = Tokenizer.from_str(trained_tokenizer_json(512, "qwen"))
    backend.add_tokens([AddedToken("x<|im", normalized=False)])
    enc = SegmentEncoder(backend)
    assert set(enc._ids) == {"<|endoftext|>"}  # both <|im_...|> tokens begin with "<|im"
    for text in ["x<|im_start|>user\nhi<|im_end|>", "ax<|im_start|>x<|im_end|>"]:
        assert enc.encode(text) == backend.encode(text, add_special_tokens=False).ids
