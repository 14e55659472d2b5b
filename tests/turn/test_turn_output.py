from tandem.parsers import ContentDelta, OutputParser, ToolCallArguments, ToolCallStart, make_tool_parser
from tandem.turn.chat_output import ChatOutputSpec
from tandem.turn.turn_output import TurnOutput
from tandem.types import FinishReason, RequestDelta
from tests.api.fakes import ByteTokenizer

TOK = ByteTokenizer()


def delta(text: str, finished: bool = False, reason: FinishReason | None = None, **counts) -> RequestDelta:
    return RequestDelta("r", TOK.encode(text, add_special_tokens=False), text, finished=finished,
                        finish_reason=reason, **counts)


def test_plain_text_counts_and_finish():
    out = TurnOutput(None, prompt_len=5)
    assert out.feed(delta("Hel", num_prompt_tokens=9, num_cached_tokens=4)) == [ContentDelta("Hel")]
    assert out.feed(delta("", True, FinishReason.LENGTH, num_output_tokens=4)) == []
    assert (out.prompt_tokens, out.cached_tokens, out.output_tokens) == (9, 4, 4)
    assert out.finish_reason is FinishReason.LENGTH and out.num_tool_calls == 0


def test_parsed_calls_are_counted():
    spec = ChatOutputSpec(OutputParser(None, make_tool_parser("hermes")), [])
    out = TurnOutput(spec.stream("r"), prompt_len=3)
    events = out.feed(delta('Hi<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'))
    events += out.feed(delta("", True, FinishReason.STOP))
    assert events[0] == ContentDelta("Hi")
    assert [type(e) for e in events[1:]] == [ToolCallStart] + [ToolCallArguments] * (len(events) - 2)
    assert "".join(e.fragment for e in events[2:]) == '{"a": 1}'
    assert out.num_tool_calls == 1


def test_stop_sequence_is_the_one_the_text_was_cut_at():
    out = TurnOutput(None, prompt_len=1)
    # the engine emitted "ab" and cut the output at the stop string "END" (the tokens still hold it)
    out.feed(RequestDelta("r", TOK.encode("abEND", add_special_tokens=False), "ab", finished=True,
                          finish_reason=FinishReason.STOP))
    assert out.stop_sequence(("XX", "END"), TOK, True) == "END"
    assert out.stop_sequence((), TOK, True) is None


def test_no_stop_sequence_when_the_turn_ended_otherwise():
    out = TurnOutput(None, prompt_len=1)
    out.feed(delta("abc", True, FinishReason.STOP))
    assert out.stop_sequence(("END",), TOK, True) is None      # an end-of-turn token
    cut = TurnOutput(None, prompt_len=1)
    cut.feed(delta("abc", True, FinishReason.LENGTH))
    assert cut.stop_sequence(("abc",), TOK, True) is None
