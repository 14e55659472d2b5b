import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from tandem.engine.detokenizer import IncrementalDetokenizer

CORPUS = ["héllo wörld 日本語 🙂 the quick brown fox jumps over the lazy dog"] * 20 + [
    "STOP here. Ünïcödé ça va? 日本 🙂🙂 emoji 🎉 done", "end of text\n\nUser: hi"] * 5
ALPHABET = "abc xyz STOPéö日本語🙂🎉\n.:"


def _byte_to_char() -> dict[int, str]:
    """GPT-2 byte-level mapping: printable bytes map to themselves, the rest above 255."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    mapping, extra = {}, 0
    for b in range(256):
        if b in keep:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def _train() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|eos|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    return tok


TOK = _train()
EOS = TOK.token_to_id("<|eos|>")
BYTE_ID = {b: TOK.token_to_id(c) for b, c in _byte_to_char().items()}
VOCAB = TOK.get_vocab_size()


def byte_ids(text: str) -> list[int]:
    """One token per UTF-8 byte: every multi-byte character spans several tokens."""
    return [BYTE_ID[b] for b in text.encode()]


def run(ids: list[int], chunks: list[int], prompt=(), **kw) -> tuple[list[str], str, bool]:
    """Push ids in groups of the given sizes (cycled); return (push texts, flush text, stopped)."""
    det = IncrementalDetokenizer(TOK, list(prompt), **kw)
    out, i, c = [], 0, 0
    while i < len(ids):
        n = chunks[c % len(chunks)] if chunks else 1
        step = det.push(ids[i:i + n])
        out.append(step.text)
        i, c = i + n, c + 1
        if step.stopped:
            assert det.stopped
            return out, "", True
    rest = det.flush()
    assert det.text == "".join(out) + rest
    return out, rest, det.stopped


def test_byte_mapping_is_right():
    assert TOK.decode(byte_ids("héllo 日本語 🙂")) == "héllo 日本語 🙂"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, VOCAB - 1), max_size=40), st.lists(st.integers(1, 4), max_size=5),
       st.lists(st.integers(0, VOCAB - 1), max_size=8))
def test_random_ids_concatenate_to_full_decode(ids, chunks, prompt):
    pushed, rest, stopped = run(ids, chunks, prompt=TOK.encode("héllo wörld").ids)
    assert not stopped
    assert "".join(pushed) + rest == TOK.decode(ids)
    # A push never ends in the middle of a character.
    assert not any(t.endswith("\ufffd") for t in pushed)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=ALPHABET, max_size=30), st.lists(st.integers(1, 3), max_size=4),
       st.booleans())
def test_valid_text_never_emits_replacement_char(text, chunks, split_bytes):
    ids = byte_ids(text) if split_bytes else TOK.encode(text).ids
    pushed, rest, _ = run(ids, chunks, prompt=TOK.encode("日本").ids)
    assert "".join(pushed) + rest == text
    assert not any("\ufffd" in t for t in pushed + [rest])


def test_multibyte_char_is_held_until_complete():
    det = IncrementalDetokenizer(TOK, [])
    ids = byte_ids("a🙂b")  # a, 4 bytes, b
    assert det.push(ids[:2]).text == "a"
    assert det.push(ids[2:4]).text == ""
    assert det.push(ids[4:5]).text == "🙂"
    assert det.push(ids[5:]).text == "b"


def test_flush_of_incomplete_char_gives_replacement():
    det = IncrementalDetokenizer(TOK, [])
    ids = byte_ids("x日")[:2]
    assert det.push(ids).text == "x"
    assert det.flush() == TOK.decode(ids)[1:] == "\ufffd"


def test_special_tokens_skipped_or_kept():
    ids = TOK.encode("hi").ids + [EOS]
    assert "".join(run(ids, [1])[0]) + run(ids, [1])[1] == "hi"
    pushed, rest, _ = run(ids, [1], skip_special_tokens=False)
    assert "".join(pushed) + rest == "hi<|eos|>"


def reference_stop(text: str, stop: tuple[str, ...], include: bool) -> tuple[str, bool]:
    """Earliest-completed stop string wins (longer on a tie)."""
    hits = [(text.find(s) + len(s), text.find(s), s) for s in stop if s in text]
    if not hits:
        return text, False
    end, start, _ = min(hits, key=lambda h: (h[0], h[1]))
    return (text[:end] if include else text[:start]), True


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=ALPHABET, max_size=30),
       st.lists(st.text(alphabet=ALPHABET, min_size=1, max_size=4), min_size=1, max_size=3),
       st.lists(st.integers(1, 3), max_size=4), st.booleans(), st.booleans())
def test_stop_strings_match_reference_for_any_grouping(text, stops, chunks, include, split_bytes):
    ids = byte_ids(text) if split_bytes else TOK.encode(text).ids
    pushed, rest, stopped = run(ids, chunks, stop=tuple(stops), include_stop_str_in_output=include)
    expected, expect_stop = reference_stop(text, tuple(stops), include)
    assert "".join(pushed) + rest == expected
    assert stopped == expect_stop


@pytest.mark.parametrize("include", [False, True])
def test_stop_string_across_token_boundaries(include):
    ids = byte_ids("ab STOP cd")  # S, T, O, P are four tokens
    det = IncrementalDetokenizer(TOK, [], stop=("STOP",), include_stop_str_in_output=include)
    texts = [det.push([i]) for i in ids[:6]]  # "ab STO"
    assert "".join(s.text for s in texts) == "ab "  # "STO" is held back
    assert not any(s.stopped for s in texts)
    last = det.push([ids[6]])
    assert last.stopped
    assert last.text == ("STOP" if include else "")
    assert det.text == ("ab STOP" if include else "ab ")
    assert det.push([ids[7]]).text == "" and det.push([ids[7]]).stopped
    assert det.flush() == ""


def test_held_text_not_a_stop_prefix_is_released():
    det = IncrementalDetokenizer(TOK, [], stop=("STOP",))
    ids = byte_ids("ab ST")
    assert det.push(ids).text == "ab "
    assert det.push(byte_ids("x")).text == "STx"
    assert det.push(byte_ids("S")).text == ""
    assert det.flush() == "S"
    assert not det.stopped


@pytest.mark.parametrize("include", [False, True])
def test_stop_at_the_very_start(include):
    det = IncrementalDetokenizer(TOK, TOK.encode("prompt").ids, stop=("\n\n",),
                                 include_stop_str_in_output=include)
    step = det.push(TOK.encode("\n\nUser: hi").ids)
    assert step.stopped and step.text == ("\n\n" if include else "")


def test_multiple_stop_strings_earliest_wins():
    ids = TOK.encode("one two three four").ids
    pushed, rest, stopped = run(ids, [2], stop=("four", "two", "three"))
    assert stopped and "".join(pushed) == "one "
    # Earliest *end*: "two" is complete before "one two three" is, whatever the grouping.
    for group in (1, 2, 50):
        pushed, _, _ = run(ids, [group], stop=("one two three", "two"),
                           include_stop_str_in_output=True)
        assert "".join(pushed) == "one two"
    # Same end: the longer one.
    pushed, _, _ = run(ids, [50], stop=("two", "one two"))
    assert "".join(pushed) == ""


def test_prefix_output_ids_not_reemitted():
    prompt = TOK.encode("héllo").ids
    ids = byte_ids(" wörld 日本語 🙂 STOP x")
    for k in range(len(ids)):
        whole = IncrementalDetokenizer(TOK, prompt, stop=("STOP",))
        first = whole.push(ids[:k]).text if k else ""
        second = whole.push(ids[k:])
        resumed = IncrementalDetokenizer(TOK, prompt, stop=("STOP",), prefix_output_ids=ids[:k])
        step = resumed.push(ids[k:])
        assert step == second, k
        assert first + step.text == " wörld 日本語 🙂 "
        assert resumed.text == whole.text == " wörld 日本語 🙂 "


def test_prompt_context_gives_first_token_its_leading_space():
    # Metaspace (SentencePiece-style): decoding a word token alone drops its leading space.
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(["hello world again"] * 10,
                            trainers.BpeTrainer(vocab_size=60, show_progress=False))
    prompt = tok.encode("hello").ids
    out = tok.encode("hello world").ids[len(prompt):]
    assert tok.decode(out) == "world"  # what a naive per-request decode would give
    det = IncrementalDetokenizer(tok, prompt)
    text = "".join(det.push([i]).text for i in out) + det.flush()
    assert text == " world"
