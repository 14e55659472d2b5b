"""mistral: Mistral / Mixtral / Ministral / Devstral tool calls, all three generations.

    [TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "f", ...}]
    [TOOL_CALLS]get_weather{"city": "Paris"}[TOOL_CALLS]f{}                (tokenizer v11)
    [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}                         (v13 and later)
    [TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{"city": "Paris"}       (with a model-made id)

The first form holds JSON call objects (see json_call.py). In the others the name is
`[A-Za-z0-9_.-]+`, the arguments a JSON object; a `[CALL_ID]` id is kept as the call's id. Other
ids are 9 alphanumerics (`random_mistral_id`), the only form Mistral templates accept back. The
markers are special (control) tokens: decode with skip_special_tokens=False. There is no end marker:
a call ends with its JSON; text after it is content.
"""

from __future__ import annotations

import re

from tandem.parsers.events import random_mistral_id
from tandem.parsers.json_call import JsonCallList
from tandem.parsers.tool_stream import ToolParser, ToolStream

BOT, ARGS, CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"
_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
_ID = re.compile(r"[A-Za-z0-9_\-]+")


class MistralStream(JsonCallList, ToolStream):
    call_markers = (BOT,)
    extra_markers = (ARGS, CALL_ID)

    def _begin_call(self, marker: str):
        return self._head

    def _head(self) -> bool:
        j = self._skip_ws()
        if j is None:
            return self._fail() if self._final else False
        if self._buf[j] == "[":   # the JSON list form, unless this is [ARGS] / [CALL_ID] (no name)
            seen = (self._literal(j, ARGS), self._literal(j, CALL_ID))
            if "wait" in seen:
                return False
            if "yes" in seen:
                return self._fail()
            self._pos = j + 1
            self._state = self._array_item
            return True
        self._pos = j
        return self._named_call()

    # -- v11+: NAME[CALL_ID]ID[ARGS]{...} ------------------------------------------------------
    def _named_call(self) -> bool:
        buf, final = self._buf, self._final
        m = _NAME.match(buf, self._pos)
        if m is None:
            return self._fail()
        if m.end() == len(buf):
            return self._fail() if final else False
        k, call_id = m.end(), None
        seen = self._literal(k, CALL_ID)
        if seen == "yes":
            idm = _ID.match(buf, k + len(CALL_ID))
            if idm is None and k + len(CALL_ID) < len(buf):
                return self._fail()
            if idm is None or idm.end() == len(buf):
                return self._fail() if final else False
            call_id, k = idm.group(), idm.end()
        elif seen == "wait":
            return False
        seen = self._literal(k, ARGS)
        if seen == "wait":
            return False
        if seen == "yes":
            k += len(ARGS)
        while k < len(buf) and buf[k] in " \t\n\r":
            k += 1
        if k == len(buf):
            return self._fail() if final else False
        if buf[k] != "{":
            return self._fail()
        self._commit(m.group(), call_id)
        self._pos = k
        return self._stream_args()


MISTRAL = ToolParser("mistral", MistralStream, requires_special_tokens=True, default_id=random_mistral_id)
