"""qwen3_coder: the XML-style calls of Qwen3-Coder (and Qwen3.5 / Qwen3-Next templates).

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    <parameter=days>
    3
    </parameter>
    </function>
    </tool_call>

Values are raw text: one leading and one trailing newline are removed, then the value is typed with
the offered tool's JSON schema (schema_values.py: "3" is 3 for an integer, a string stays a string;
unknown parameters keep strings and take JSON-looking values as JSON). The arguments are the
canonical JSON object of the typed values, in the order written: `{"city": "Paris", "days": 3}`.

Streaming: the call starts once `<function=NAME>` is read (arguments `{`); a value that is certainly a
string streams as it arrives (held back: a possible trailing newline and a possible end tag);
any other value is sent whole when it ends. A value also ends, leniently, at `<parameter=`,
`</function>` or `</tool_call>` when its `</parameter>` is missing. A `<function=` with no
`<tool_call>` around it is a call too. The tags are not special tokens.
"""

from __future__ import annotations

import re

from tandem.parsers.json_stream import canonical, canonical_str
from tandem.parsers.schema_values import certain_string, convert, param_kind
from tandem.parsers.text import MarkerScanner
from tandem.parsers.tool_stream import ToolParser, ToolStream

START, END = "<tool_call>", "</tool_call>"
FN, FN_END = "<function=", "</function>"
PARAM, PARAM_END = "<parameter=", "</parameter>"
_TAG_NAME = re.compile(r"[^>\n<]*")
_VALUE_END = MarkerScanner((PARAM_END, PARAM, FN_END, END))


class Qwen3CoderStream(ToolStream):
    call_markers = (START, FN)
    drop_markers = (END, FN_END)
    end_markers = (END,)
    extra_markers = (PARAM, PARAM_END)

    def _begin_call(self, marker: str):
        return self._function if marker == FN else self._open

    def _open(self) -> bool:
        """After `<tool_call>`: spaces, then `<function=`."""
        j = self._skip_ws()
        if j is None:
            return self._fail() if self._final else False
        seen = self._literal(j, FN)
        if seen != "yes":
            return False if seen == "wait" else self._fail()
        self._pos = j + len(FN)
        self._state = self._function
        return True

    def _tag_name(self) -> str | None | bool:
        """`NAME>` at _pos: the stripped name (consumed), False to wait, None when malformed."""
        m = _TAG_NAME.match(self._buf, self._pos)
        k = m.end()
        if k == len(self._buf):
            return None if self._final else False
        if self._buf[k] != ">" or not m.group().strip():
            return None
        self._pos = k + 1
        return m.group().strip()

    def _function(self) -> bool:
        name = self._tag_name()
        if name is False:
            return False
        if name is None:
            return self._fail()
        self._commit(name)
        self._args("{")
        self._fn, self._count = name, 0
        self._state = self._params
        return True

    def _params(self) -> bool:
        """Between parameters: the next `<parameter=`, or the end of the function."""
        j = self._skip_ws()
        if j is None:
            return self._abort("}") if self._final else False
        seen = {lit: self._literal(j, lit) for lit in (PARAM, FN_END, END)}
        if seen[PARAM] == "yes":
            self._pos = j + len(PARAM)
            self._state = self._param_name
            return True
        if seen[FN_END] == "yes" or seen[END] == "yes":
            self._pos = j + (len(FN_END) if seen[FN_END] == "yes" else 0)
            self._args("}")
            return self._call_done()
        if "wait" in seen.values():
            return False
        self._pos = j
        return self._abort("}")

    def _param_name(self) -> bool:
        name = self._tag_name()
        if name is False:
            return False
        if name is None:
            return self._abort("}")
        self._kind = param_kind(self.tools, self._fn, name)
        self._prefix = (", " if self._count else "") + canonical(name) + ": "
        self._value = ""          # value text read and not yet written
        self._lead_seen = False   # the value's first character was read (a leading newline is cut)
        self._quoted = False      # the value streams as a string: its opening quote was written
        self._state = self._value_text
        return True

    def _value_text(self) -> bool:
        buf, start = self._buf, self._pos
        hit = _VALUE_END.search(buf, start)
        if hit is not None:
            at, marker = hit
        else:
            at = len(buf) if self._final else len(buf) - _VALUE_END.held(buf, start)
            marker = None
        text = buf[start:at]
        self._pos = at
        if text and not self._lead_seen:
            self._lead_seen = True
            text = text[1:] if text[0] == "\n" else text
        self._value += text
        if hit is None and not self._final:          # the value goes on: stream what is certain
            certain = self._value[:-1] if self._value.endswith("\n") else self._value
            if not self._quoted and certain_string(certain, self._kind):
                self._args(self._prefix + '"')
                self._quoted = True
            if self._quoted:
                self._args(canonical_str(certain))
                self._value = self._value[len(certain):]
            return at > start
        value = self._value[:-1] if self._value.endswith("\n") else self._value
        if self._quoted:
            self._args(canonical_str(value) + '"')
        else:
            self._args(self._prefix + canonical(convert(value, self._kind)))
        self._count += 1
        if marker is None:                            # the text ended inside the value
            return self._abort("}")
        if marker == PARAM_END:
            self._pos += len(PARAM_END)
        self._state = self._params
        return True


QWEN3_CODER = ToolParser("qwen3_coder", Qwen3CoderStream, requires_special_tokens=False)
