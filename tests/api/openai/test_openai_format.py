import math
from dataclasses import replace

from tests.api.fakes import ByteTokenizer
from tests.api.sse import events
from tandem.api.openai.logprobs_format import TokenTexts, chat_logprobs, completion_logprobs
from tandem.api.openai.openai_format import OpenAIFormatter, usage_dict
from tandem.api.openai.openai_protocol import ParseContext, parse_chat, parse_completion
from tandem.types import FinishReason, RequestDelta, TokenLogprob

TOK = ByteTokenizer()
CTX = ParseContext("m", TOK, 256)
A, B = 3 + ord("a"), 3 + ord("b")


def delta(i, text, finished=False, lps=None, reason=FinishReason.STOP, out=0):
    return RequestDelta(request_id=f"r-{i}", new_token_ids=[3 + ord(c) for c in text],
                        new_text=text, finished=finished,
                        finish_reason=reason if finished else None, logprobs=lps,
                        num_prompt_tokens=10, num_cached_tokens=4, num_output_tokens=out)


def test_chat_logprobs_shape_and_clamped_minus_inf():
    lps = [TokenLogprob(A, -math.inf, ((A, -0.1), (B, -2.0)))]
    (entry,) = chat_logprobs(lps, TokenTexts(TOK))
    assert entry == {"token": "a", "logprob": -9999.0, "bytes": [97], "top_logprobs": [
        {"token": "a", "logprob": -0.1, "bytes": [97]},
        {"token": "b", "logprob": -2.0, "bytes": [98]}]}


def test_completion_logprobs_offsets_continue():
    lps = [TokenLogprob(A, -0.5, ((B, -0.2),)), TokenLogprob(B, -0.2, ())]
    out, end = completion_logprobs(lps, TokenTexts(TOK), offset=7)
    assert out == {"tokens": ["a", "b"], "token_logprobs": [-0.5, -0.2],
                   "top_logprobs": [{"b": -0.2, "a": -0.5}, {"b": -0.2}], "text_offset": [7, 8]}
    assert end == 9


def test_chat_stream_chunks_follow_openai():
    p = parse_chat({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True,
                    "stream_options": {"include_usage": True}}, CTX)
    f = OpenAIFormatter(p, "chatcmpl-1", "fp_x", TokenTexts(TOK))
    body = f.stream_start() + f.stream_delta(0, delta(0, "ab")) + \
        f.stream_delta(0, delta(0, "", finished=True, out=2)) + f.stream_end()
    ev = events(body.decode())
    assert all(e["object"] == "chat.completion.chunk" and e["id"] == "chatcmpl-1"
               and e["model"] == "m" and e["system_fingerprint"] == "fp_x" for e in ev)
    assert ev[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert ev[1]["choices"][0]["delta"] == {"content": "ab"} and ev[1]["usage"] is None
    assert ev[2]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}
    assert ev[3]["choices"] == [] and ev[3]["usage"] == usage_dict(10, 2, 4)
    assert len(ev) == 4


def test_completion_stream_puts_finish_reason_on_last_text():
    p = parse_completion({"model": "m", "prompt": "x", "stream": True, "logprobs": 0}, CTX)
    f = OpenAIFormatter(p, "cmpl-1", "fp", TokenTexts(TOK))
    assert f.stream_start() == b""
    lp = [TokenLogprob(A, -1.0, ())]
    ev = events((f.stream_delta(0, delta(0, "a", lps=lp)) +
                 f.stream_delta(0, delta(0, "a", True, lps=lp, reason=FinishReason.LENGTH))).decode())
    assert [e["choices"][0]["finish_reason"] for e in ev] == [None, "length"]
    assert [e["choices"][0]["logprobs"]["text_offset"] for e in ev] == [[0], [1]]
    assert "usage" not in ev[0] and f.stream_end() == b""


def test_response_merges_choices_and_counts_prompt_once_per_prompt():
    p = parse_completion({"model": "m", "prompt": ["x", "y"], "n": 2}, CTX)
    f = OpenAIFormatter(p, "cmpl-1", "fp", TokenTexts(TOK))
    for i in range(4):
        f.add(i, delta(i, "a" * (i + 1)))
        f.add(i, delta(i, "", finished=True))
    r = f.response()
    assert [c["text"] for c in r["choices"]] == ["a", "aa", "aaa", "aaaa"]
    assert [c["index"] for c in r["choices"]] == [0, 1, 2, 3]
    assert r["usage"] == usage_dict(20, 10, 8) and r["object"] == "text_completion"


def test_chat_response_with_logprobs():
    p = parse_chat({"model": "m", "messages": [{"role": "user", "content": "x"}],
                    "logprobs": True}, CTX)
    f = OpenAIFormatter(p, "chatcmpl-1", "fp", TokenTexts(TOK))
    f.add(0, delta(0, "a", lps=[TokenLogprob(A, -0.3, ())]))
    f.add(0, delta(0, "b", True, lps=[TokenLogprob(B, -0.7, ())], reason=FinishReason.LENGTH, out=2))
    (c,) = f.response()["choices"]
    assert c["message"] == {"role": "assistant", "content": "ab", "refusal": None}
    assert c["finish_reason"] == "length"
    assert [e["token"] for e in c["logprobs"]["content"]] == ["a", "b"]
    assert [e["top_logprobs"] for e in c["logprobs"]["content"]] == [[], []]


class _BytePieces:
    """Byte-level BPE pieces: id 0 = 'Ġhi' (" hi"), 1 = 'â' (byte 0xE2 alone), 2 = '<0x80>'."""

    def decode(self, ids, skip_special_tokens=True):
        return {0: " hi", 1: "\ufffd", 2: "\ufffd"}[ids[0]]

    def convert_ids_to_tokens(self, ids):
        return [{0: "Ġhi", 1: "â", 2: "<0x80>"}[i] for i in ids]


def test_partial_utf8_tokens_show_their_raw_bytes():
    texts = TokenTexts(_BytePieces())
    assert texts.entry(0) == (" hi", [32, 104, 105])
    assert texts.entry(1) == ("bytes:\\xe2", [0xE2])
    assert texts.entry(2) == ("bytes:\\x80", [0x80])


def test_echo_with_logprobs_puts_the_scored_prompt_first():
    # prompt "ab" encodes as [BOS, a, b]: tokens a and b are scored, BOS is not
    p = parse_completion({"model": "m", "prompt": "ab", "echo": True, "logprobs": 1,
                          "prompt_logprobs": 2}, CTX)
    bos = p.prompts[0][0]
    scored = [TokenLogprob(A, -1.5, ((B, -0.5), (A, -1.5)), rank=2), TokenLogprob(B, -0.25, ((B, -0.25),), rank=1)]
    first = RequestDelta(request_id="r-0", new_token_ids=[A], new_text="a", logprobs=[TokenLogprob(A, -0.75, ())],
                         prompt_logprobs=scored, num_prompt_tokens=3)
    last = delta(0, "", finished=True, out=1)
    f = OpenAIFormatter(p, "cmpl-1", "fp", TokenTexts(TOK))
    f.add(0, first)
    f.add(0, last)
    (choice,) = f.response()["choices"]
    bos_text = TokenTexts(TOK)(bos)
    assert choice["text"] == "aba"
    assert choice["logprobs"] == {
        "tokens": [bos_text, "a", "b", "a"], "token_logprobs": [None, -1.5, -0.25, -0.75],
        "top_logprobs": [None, {"b": -0.5, "a": -1.5}, {"b": -0.25}, {"a": -0.75}],
        "text_offset": [0, len(bos_text), len(bos_text) + 1, len(bos_text) + 2]}
    assert choice["prompt_logprobs"] == [
        None, {str(A): {"logprob": -1.5, "rank": 2, "decoded_token": "a"},
               str(B): {"logprob": -0.5, "rank": 1, "decoded_token": "b"}},
        {str(B): {"logprob": -0.25, "rank": 1, "decoded_token": "b"}}]

    # streamed: no echo at the start; it comes with the first delta, with the prompt's logprobs
    s = OpenAIFormatter(replace(p, stream=True), "cmpl-1", "fp", TokenTexts(TOK))
    assert s.stream_start() == b""
    ev = events((s.stream_delta(0, first) + s.stream_delta(0, last)).decode())
    assert ev[0]["choices"][0]["text"] == "ab"
    assert ev[0]["choices"][0]["logprobs"]["token_logprobs"] == [None, -1.5, -0.25]
    assert ev[1]["choices"][0]["text"] == "a"
    assert ev[1]["choices"][0]["logprobs"]["text_offset"] == [len(bos_text) + 2]
    assert ev[1]["choices"][0]["prompt_logprobs"] == choice["prompt_logprobs"]


def _textless(i):
    """A step's token that adds no text (a special token, the first byte of a character)."""
    return RequestDelta(request_id=f"r-{i}", new_token_ids=[1], new_text="", finished=False,
                        num_prompt_tokens=10, num_cached_tokens=4, num_output_tokens=1)


def test_a_token_without_text_still_gets_a_chunk_with_its_usage():
    p = parse_completion({"model": "m", "prompt": "x", "stream": True, "stream_options": {
        "include_usage": True, "continuous_usage_stats": True}}, CTX)
    f = OpenAIFormatter(p, "cmpl-1", "fp", TokenTexts(TOK))
    (e,) = events(f.stream_delta(0, _textless(0)).decode())
    assert e["choices"][0]["text"] == "" and e["choices"][0]["finish_reason"] is None
    assert e["usage"]["completion_tokens"] == 1
    c = parse_chat({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}, CTX)
    f = OpenAIFormatter(c, "chatcmpl-1", "fp", TokenTexts(TOK))
    (e,) = events(f.stream_delta(0, _textless(0)).decode())
    assert e["choices"][0]["delta"] == {"content": ""}


def test_a_delta_without_tokens_or_text_sends_nothing():
    p = parse_completion({"model": "m", "prompt": "x", "stream": True}, CTX)
    f = OpenAIFormatter(p, "cmpl-1", "fp", TokenTexts(TOK))
    assert f.stream_delta(0, replace(_textless(0), new_token_ids=[])) == b""
