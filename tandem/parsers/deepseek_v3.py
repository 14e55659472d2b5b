"""deepseek_v3: DeepSeek-V3 / V3-0324 / R1-0528 tool calls (and the V3.1 variant).

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
    ```json
    {"city": "Paris"}
    ```<｜tool▁call▁end｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f
    ```json
    {}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

The V3.1 form, `<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>`,
is told apart by the `{` right after the separator. Names are `[A-Za-z0-9_.-]+`; the code fence
(```json or ```) is optional. The markers (fullwidth bars, U+2581 for spaces) are added tokens that
decoding with skip_special_tokens=True may strip: decode with skip_special_tokens=False.
"""

from __future__ import annotations

import re

from tandem.parsers.tool_stream import ToolParser, ToolStream

CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
BEGIN, SEP, END = "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"
FENCE = "```"
_NAME = re.compile(r"[A-Za-z0-9_.\-]*")


class DeepSeekV3Stream(ToolStream):
    call_markers = (BEGIN,)
    drop_markers = (CALLS_BEGIN, CALLS_END, END)
    end_markers = (END,)
    extra_markers = (SEP,)

    def _begin_call(self, marker: str):
        return self._head

    def _head(self) -> bool:
        """`function<｜tool▁sep｜>NAME\\n```json\\n{` (V3) or `NAME<｜tool▁sep｜>{` (V3.1)."""
        buf = self._buf
        m = _NAME.match(buf, self._pos)
        k = m.end()
        if k == len(buf):
            return self._fail() if self._final else False
        seen = self._literal(k, SEP)
        if seen != "yes":
            return False if seen == "wait" else self._fail()
        k += len(SEP)
        if k == len(buf):
            return self._fail() if self._final else False
        if buf[k] == "{":                       # V3.1: the name came before the separator
            if not m.group():
                return self._fail()
            return self._open(m.group(), k)
        n = _NAME.match(buf, k)                 # V3: the name, then a new line
        j = n.end()
        if j == len(buf):
            return self._fail() if self._final else False
        if not n.group() or buf[j] not in "\r\n":
            return self._fail()
        j = self._skip_ws(j)
        if j is None:
            return self._fail() if self._final else False
        if buf[j] != "{":
            seen = self._literal(j, FENCE)
            if seen != "yes":
                return False if seen == "wait" else self._fail()
            j += len(FENCE)
            seen = self._literal(j, "json")
            if seen == "wait":
                return False
            if seen == "yes":
                j += len("json")
            j = self._skip_ws(j)
            if j is None:
                return self._fail() if self._final else False
        if buf[j] != "{":
            return self._fail()
        return self._open(n.group(), j)

    def _open(self, name: str, at: int) -> bool:
        self._commit(name)
        self._pos = at
        return self._stream_args(self._tail)

    def _tail(self) -> bool:
        """After the arguments: the closing fence, if any (the end markers are dropped as markup)."""
        j = self._skip_ws()
        if j is None:
            if not self._final:
                self._state = self._tail
                return False
            return self._call_done()
        seen = self._literal(j, FENCE)
        if seen == "wait":
            self._state = self._tail
            return False
        if seen == "yes":
            self._pos = j + len(FENCE)
        return self._call_done()


DEEPSEEK_V3 = ToolParser("deepseek_v3", DeepSeekV3Stream, requires_special_tokens=True)
