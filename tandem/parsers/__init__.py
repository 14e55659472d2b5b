"""Parsing model output into reasoning, content and tool calls, streamed or not (vLLM's tool-call and
reasoning parsers, by vLLM's names). Pure Python: no engine, no tokenizer.

    from tandem.parsers import OutputParser, make_reasoning_parser, make_tool_parser
    parser = OutputParser(make_reasoning_parser("qwen3"), make_tool_parser("hermes"))
    result = parser.parse(text, tools)                        # ParsedOutput(reasoning, content, tool_calls)
    stream = parser.stream(tools)                             # or per delta: stream.feed(d), stream.finish()

Every streaming parser guarantees: for any split of a text into deltas, the events reassemble
(`collect`) to exactly `parse(text)`; a call's argument fragments concatenate to its `arguments`.
See tool_stream.py for the call-block rules and json_stream.py for the canonical arguments.
"""

from tandem.parsers.events import (
    ContentDelta, Event, IdFactory, ParsedOutput, ParsedTools, ReasoningDelta, ToolCall,
    ToolCallArguments, ToolCallStart, collect, random_call_id, random_mistral_id,
)
from tandem.parsers.output_parser import OutputParser, OutputStream
from tandem.parsers.reasoning import (
    REASONING_PARSER_NAMES, ReasoningParser, ReasoningStream, make_reasoning_parser,
)
from tandem.parsers.tool_registry import (
    TOOL_PARSER_NAMES, UnknownParser, detect_tool_parser, make_tool_parser,
)
from tandem.parsers.tool_stream import ToolParser, ToolStream

__all__ = [
    "ContentDelta", "Event", "IdFactory", "OutputParser", "OutputStream", "ParsedOutput", "ParsedTools",
    "REASONING_PARSER_NAMES", "ReasoningDelta", "ReasoningParser", "ReasoningStream", "TOOL_PARSER_NAMES",
    "ToolCall", "ToolCallArguments", "ToolCallStart", "ToolParser", "ToolStream", "UnknownParser",
    "collect", "detect_tool_parser", "make_reasoning_parser", "make_tool_parser", "random_call_id",
    "random_mistral_id",
]
