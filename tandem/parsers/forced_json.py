"""Calls forced as plain JSON, for a model whose own tool-call format tandem does not know (no
tool-call parser): vLLM's answer to tool_choice "required" or a named function there. The grammar
(tandem/turn/json_tools.py) makes the model write, from its first character:

    [{"name": "get_weather", "parameters": {"city": "Paris"}}, {"name": "f", "parameters": {}}]
                                                        (json_list: tool_choice "required")
    {"city": "Paris"}                                   (json_arguments: a named function)

json_list's items are call objects as json_call.py reads them; json_arguments' whole text is the
arguments of the one function the request names (the stream's only tool). Text that is not such
JSON (only a truncated or grammar-less output could write it) is content, as in every format.
These are not model formats: `--tool-call-parser` does not list them.
"""

from __future__ import annotations

from tandem.parsers.json_call import JsonCallList
from tandem.parsers.tool_stream import ToolParser, ToolStream


class JsonListStream(JsonCallList, ToolStream):
    def _initial_state(self):
        return self._open

    def _open(self) -> bool:
        j = self._skip_ws()
        if j is None:
            if not self._final:
                return False
            self._state = self._scan
            return True
        if self._buf[j] != "[":
            self._state = self._scan
            return True
        self._block = j
        self._pos = j + 1
        self._state = self._array_item
        return True


class JsonArgumentsStream(ToolStream):
    """Its tools are the named function alone."""

    def _initial_state(self):
        return self._open

    def _open(self) -> bool:
        j = self._skip_ws()
        if j is None:
            if not self._final:
                return False
            self._state = self._scan
            return True
        if self._buf[j] != "{" or not self.tools:
            self._state = self._scan
            return True
        self._pos = j
        self._commit(self.tools[0]["function"]["name"])
        return self._stream_args()


JSON_LIST = ToolParser("json_list", JsonListStream, requires_special_tokens=False)
JSON_ARGUMENTS = ToolParser("json_arguments", JsonArgumentsStream, requires_special_tokens=False)
