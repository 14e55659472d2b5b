"""Reads one JSON call object, `{"name": "f", "arguments": {...}}`, out of a ToolStream's buffer
(used by the hermes, llama3_json and mistral formats, and forced_json.py's list).

- Keys in any order. `name` must be a non-empty string. The arguments are under `arguments` (or
  `parameters`, as Llama writes them); `type` and `id` are read and ignored. Any other key before the
  call is committed means this is not a call (e.g. a JSON answer): the block fails, becoming content.
- Commit (ToolCallStart) as soon as the name is known and an object argument has started; arguments
  read before the name are held and sent with the start. An object closed with a name and no
  arguments is a call with `{}`.
- Arguments that are not an object: `null` means `{}`; a string holding a JSON object (some models
  write `"arguments": "{\\"a\\": 1}"`) means that object; anything else fails the block. These are
  known only once complete, so they are sent whole.
- After commit, further keys are read and ignored, whatever they are.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from tandem.parsers.json_stream import JsonValueStream, canonical, loads_finite
from tandem.parsers.tool_stream import ToolStream

ARG_KEYS = ("arguments", "parameters")
IGNORED_KEYS = ("type", "id")


class JsonCallReader:
    def __init__(self, host: ToolStream, on_done: Callable[[], bool]) -> None:
        self._h = host
        self._on_done = on_done
        self._phase = "open"   # open | key_or_end | key | key_str | colon | value | after
        self._vs: JsonValueStream | None = None
        self._key = ""         # the member being read
        self._role = ""        # of the value being read: name | args | skip
        self._name: str | None = None
        self._args: JsonValueStream | None = None
        self._held: list[str] = []    # canonical arguments read before the commit
        self._args_ready = False      # the held arguments may be sent (object started, or converted)

    def step(self) -> bool:
        h = self._h
        if self._phase in ("key_str", "value"):
            return self._read_value()
        j = h._skip_ws()
        if j is None:
            if h._final:
                h._pos = len(h._buf)
                return h._stop(self._closers())
            return False
        c = h._buf[j]
        h._pos = j
        if self._phase == "open":
            if c != "{":
                return h._fail()
            self._phase = "key_or_end"
        elif self._phase in ("key_or_end", "key"):
            if c == "}" and self._phase == "key_or_end":
                return self._close()
            if c != '"':
                return h._stop(self._closers())
            self._vs, self._phase = JsonValueStream(), "key_str"
            return True
        elif self._phase == "colon":
            if c != ":":
                return h._stop(self._closers())
            self._phase = "value"
            self._vs = None
        else:  # after
            if c == "}":
                return self._close()
            if c != ",":
                return h._stop(self._closers())
            self._phase = "key"
        h._pos = j + 1
        return True

    def _closers(self) -> str:
        a = self._args
        return a.repair() if a is not None and a.status != "done" else ""

    def _read_value(self) -> bool:
        h = self._h
        if self._vs is None:               # first call for this value: decide its role
            key = self._key
            self._vs = JsonValueStream()
            if key == "name" and self._name is None:
                self._role = "name"
            elif key in ARG_KEYS and self._args is None:
                self._role, self._args = "args", self._vs
            elif key in IGNORED_KEYS or h._committed:
                self._role = "skip"
            else:
                return h._fail()
        vs = self._vs
        start = h._pos
        h._pos = vs.advance(h._buf, h._pos, h._final)
        if self._phase == "key_str":
            return self._read_key(vs, start)
        if self._role == "args":
            self._on_args(vs.take())
        if vs.status == "error" or (vs.status == "more" and h._final):
            return h._stop(self._closers())
        if vs.status == "more":
            return h._pos > start
        if self._role == "name":
            name = json.loads(vs.take())
            if not isinstance(name, str) or not name:
                return h._fail()
            self._name = name
            self._maybe_commit()
        elif self._role == "args" and self._args.first != "{":
            if not self._convert_args():
                return h._fail()
            self._maybe_commit()
        self._phase = "after"
        return True

    def _read_key(self, vs: JsonValueStream, start: int) -> bool:
        h = self._h
        if vs.status == "error" or (vs.status == "more" and h._final):
            return h._stop(self._closers())
        if vs.status == "more":
            return h._pos > start
        self._key = json.loads(vs.take())
        self._phase, self._vs = "colon", None
        return True

    def _on_args(self, text: str) -> None:
        if self._args.first == "{":
            self._args_ready = True
            if self._h._committed:
                self._h._args(text)
                return
        self._held.append(text)
        self._maybe_commit()

    def _convert_args(self) -> bool:
        raw = "".join(self._held)
        value = json.loads(raw)
        if value is None:
            value = {}
        elif isinstance(value, str):
            try:
                value = loads_finite(value)
            except ValueError:
                return False
        if not isinstance(value, dict):
            return False
        self._held, self._args_ready = [canonical(value)], True
        return True

    def _maybe_commit(self) -> None:
        h = self._h
        if not h._committed and self._name is not None and self._args_ready:
            h._commit(self._name)
            h._args("".join(self._held))
            self._held = []

    def _close(self) -> bool:
        h = self._h
        h._pos += 1
        if not h._committed:
            if self._name is None or (self._args is not None and not self._args_ready):
                return h._fail()
            if self._args is None:
                self._held, self._args_ready = ["{}"], True
            self._maybe_commit()
        return self._on_done()


class JsonCallList:
    """Mixin of a ToolStream: the JSON list of call objects `[{...}, {...}]` (mistral before v11,
    the forced calls of json_list.py), read from just after its `[`. The list ends at `]`, or
    at anything but `,` after a call, which is then content."""

    def _array_item(self) -> bool:
        j = self._skip_ws()
        if j is None:
            return self._stop("") if self._final else False
        if self._buf[j] == "]":
            self._pos = j + 1
            return self._call_done()
        if self._block is None:
            self._block = j
        self._pos = j
        self._state = JsonCallReader(self, self._array_next).step
        return True

    def _array_next(self) -> bool:
        self._state = self._array_sep
        return True

    def _array_sep(self) -> bool:
        j = self._skip_ws()
        if j is None:
            if not self._final:
                return False
            self._pos = len(self._buf)
            return self._call_done()
        c = self._buf[j]
        if c == ",":
            self._pos = j + 1
            self._state = self._array_item
        elif c == "]":
            self._pos = j + 1
            return self._call_done()
        else:
            return self._call_done()
        return True
