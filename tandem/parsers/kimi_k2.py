"""kimi_k2: Kimi K2 / K2-Instruct / K2-Thinking tool calls.

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_call_begin|>functions.f:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>

The text between `<|tool_call_begin|>` and `<|tool_call_argument_begin|>` is the call's id,
`functions.NAME:INDEX` (or `NAME:INDEX`); as vLLM does, the call keeps that id (Kimi's template
writes it back into the next prompt), and the name is the id without the `functions.` prefix and the
`:INDEX`. The arguments are a JSON object. The markers are special tokens: decode with
skip_special_tokens=False.
"""

from __future__ import annotations

import re

from tandem.parsers.tool_stream import ToolParser, ToolStream

SECTION_BEGIN, SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
BEGIN, ARG, END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
_ID = re.compile(r"[^\s<]*")
_NAME_IN_ID = re.compile(r"(?:functions\.)?(.+):[0-9]+")


class KimiK2Stream(ToolStream):
    call_markers = (BEGIN,)
    drop_markers = (SECTION_BEGIN, SECTION_END, END)
    end_markers = (END,)
    extra_markers = (ARG,)

    def _begin_call(self, marker: str):
        return self._head

    def _head(self) -> bool:
        j = self._skip_ws()
        if j is None:
            return self._fail() if self._final else False
        buf = self._buf
        m = _ID.match(buf, j)
        self._pos = j
        k = self._skip_ws(m.end())
        if k is None:
            return self._fail() if self._final else False
        seen = self._literal(k, ARG)
        if seen != "yes":
            return False if seen == "wait" else self._fail()
        name = _NAME_IN_ID.fullmatch(m.group())
        a = self._skip_ws(k + len(ARG))
        if a is None:
            return self._fail() if self._final else False
        if name is None or buf[a] != "{":
            return self._fail()
        self._commit(name.group(1), m.group())
        self._pos = a
        return self._stream_args()


KIMI_K2 = ToolParser("kimi_k2", KimiK2Stream, requires_special_tokens=True)
