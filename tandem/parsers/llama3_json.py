"""llama3_json: Llama 3.1 / 3.2 / 3.3 JSON tool calls.

    <|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "f", "parameters": {}}

A call is a JSON object (see json_call.py; `parameters` or `arguments`, an optional `"type": "function"`).
Calls are recognized at the very start of the output (after spaces), where the model writes them
with no tag when it was prompted with JSON-formatted tools, or after a `<|python_tag|>` anywhere.
Several calls are separated by `;` (or only by spaces). A leading object that is not a call (a JSON
answer) is content. `<|python_tag|>` is a special token; without it (skip_special_tokens=True) the
calls still parse when they open the output, so the parser does not need the special tokens.
"""

from __future__ import annotations

from tandem.parsers.json_call import JsonCallReader
from tandem.parsers.tool_stream import ToolParser, ToolStream

PYTHON_TAG = "<|python_tag|>"


class Llama3JsonStream(ToolStream):
    call_markers = (PYTHON_TAG,)

    def _initial_state(self):
        return self._start

    def _start(self) -> bool:
        """Before anything is written: a leading `{` or `<|python_tag|>` opens the calls."""
        j = self._skip_ws()
        if j is None and not self._final:
            return False
        if j is not None:
            rest = self._buf[j:j + len(PYTHON_TAG)]
            if rest == "{" or rest[:1] == "{":
                self._block = self._pos
                self._pos = j
                self._state = self._call
                return True
            if PYTHON_TAG.startswith(rest) and len(rest) < len(PYTHON_TAG) and not self._final:
                return False
        self._state = self._scan
        return True

    def _begin_call(self, marker: str):
        return self._call

    def _call(self) -> bool:
        self._state = JsonCallReader(self, self._after_call).step
        return True

    def _after_call(self) -> bool:
        self._state = self._separator
        return True

    def _separator(self) -> bool:
        """After a call: `;` or spaces then `{` is the next call; anything else is content."""
        j = self._skip_ws()
        if j is None:
            if not self._final:
                return False
            self._state = self._scan
            return True
        c = self._buf[j]
        if c == ";":
            self._block = j
            self._pos = j + 1
            self._state = self._call
        elif c == "{":
            self._block = self._pos
            self._pos = j
            self._state = self._call
        else:
            self._state = self._scan
        return True


LLAMA3_JSON = ToolParser("llama3_json", Llama3JsonStream, requires_special_tokens=False)
