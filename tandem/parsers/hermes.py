"""hermes: the format of Hermes 2 Pro, Qwen2.5, Qwen3 and tandem's demo models.

    Let me check.<tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>
    <tool_call>
    {"name": "get_time", "arguments": {"zone": "CET"}}
    </tool_call>

Each call is a JSON object (see json_call.py) between `<tool_call>` and `</tool_call>`. The end tag is
optional: the call ends with its object, so a `</tool_call>` inside an argument string is just text.
Neither tag is a special token in these tokenizers (they survive skip_special_tokens), but some
models mark them special; check `ToolParser.markers` against the tokenizer.
"""

from __future__ import annotations

from tandem.parsers.json_call import JsonCallReader
from tandem.parsers.tool_stream import ToolParser, ToolStream

START, END = "<tool_call>", "</tool_call>"


class HermesStream(ToolStream):
    call_markers = (START,)
    drop_markers = (END,)
    end_markers = (END,)

    def _begin_call(self, marker: str):
        return JsonCallReader(self, self._call_done).step


HERMES = ToolParser("hermes", HermesStream, requires_special_tokens=False)
