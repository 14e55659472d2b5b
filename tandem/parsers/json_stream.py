"""Incremental JSON reader that writes the canonical form of one JSON value as it arrives.

Canonical form = `json.dumps(json.loads(raw, strict=False), ensure_ascii=False)`: separators ", " and
": ", strings re-escaped by json.dumps, numbers re-printed (`1.50` -> `1.5`, `-0` -> `0`), non-ASCII
characters written as themselves. It is written as a stream whose every prefix is certain: whatever
follows in the raw text, the canonical text only grows after it. Two exceptions, both by choice:
duplicate keys are kept in the order written (json.loads keeps the last value), and raw control
characters inside strings are accepted (as `strict=False`) and written escaped; a lone surrogate
(`"\ud800"` with no pair) is written as its escape so that the text stays encodable as UTF-8.

What is written when (so that written text + `repair()` is always valid JSON):
- `{` and `[` as soon as read; `}` and `]` when read;
- a member's `, "key": ` or an element's `, ` only together with the start of its value;
- a string's opening quote at once, then its characters as they are decoded (an escape once complete;
  a high surrogate escape once the next character shows whether it pairs with a low one);
- a number or true/false/null once the character after it ends it (or the text ends).
`repair()` returns the closers (`"`, `]`, `}`) that make the written text a complete value; anything
not yet written (a key, a partial number, a partial escape) is dropped.

NaN, Infinity and numbers that overflow a float are errors (they are not JSON).

Usage: `pos = s.advance(buf, pos, final)` consumes from `buf[pos:]` and returns where it stopped:
at the end of buf (status "more"), just after the value (status "done"; a number or literal ends
before the character that ended it), or at the offending character (status "error"; for a bad
number or literal, at its first character). A number or literal is consumed only once complete.
`take()` returns the canonical text written since the last call.
"""

from __future__ import annotations

import json
import math
import re

WS = " \t\n\r"
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z")
_NUMBER_CHARS = frozenset("0123456789+-.eE")
_LITERALS = ("true", "false", "null")
_STR_RUN = re.compile(r'[^"\\]+')
_HEX = frozenset("0123456789abcdefABCDEF")
_SURROGATE = re.compile("[\ud800-\udfff]")
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _escape_surrogates(text: str) -> str:
    # a lone surrogate cannot be encoded as UTF-8: write it as a \uXXXX escape (valid JSON)
    return _SURROGATE.sub(lambda m: "\\u%04x" % ord(m.group()), text) if _SURROGATE.search(text) else text


def canonical_str(text: str) -> str:
    """The body (no quotes) of canonical(text); per character, so any split of `text` gives the same."""
    return _escape_surrogates(json.dumps(text, ensure_ascii=False)[1:-1])


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def loads_finite(text: str):
    """json.loads without NaN/Infinity (raises ValueError); raw control characters allowed in strings."""
    obj = json.loads(text, strict=False, parse_constant=_reject_constant)
    _check_finite(obj)
    return obj


def _check_finite(obj) -> None:
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError("number out of range")
    if isinstance(obj, dict):
        for v in obj.values():
            _check_finite(v)
    elif isinstance(obj, list):
        for v in obj:
            _check_finite(v)


def _canonical_number(tok: str) -> str | None:
    if not _NUMBER.match(tok):
        return None
    try:
        value = json.loads(tok)
    except ValueError:            # an integer too long for int() (over 4300 digits)
        return None
    return json.dumps(value) if math.isfinite(value) else None


def canonical(obj) -> str:
    """json.dumps(obj, ensure_ascii=False), with lone surrogates escaped."""
    return _escape_surrogates(json.dumps(obj, ensure_ascii=False))


class JsonValueStream:
    def __init__(self) -> None:
        self.status = "more"      # "more" | "done" | "error"
        self.first = ""           # the value's first character, once read
        self._out: list[str] = []
        # open containers, innermost last: [kind "{" or "[", state, members written]
        self._stack: list[list] = []
        self._prefix = ""          # ", " / ', "key": ' to write with the next value's start
        self._scalar = False       # a number or literal is being read
        self._in_str = False       # inside a string
        self._str_is_key = False
        self._key: list[str] = []
        self._esc: str | None = None      # text after a backslash, while an escape is incomplete
        self._hi = ""              # a high surrogate waiting for its pair
        self._quote_open = False   # a value string's opening quote was written, not yet its closing one

    @property
    def started(self) -> bool:
        return bool(self.first)

    def take(self) -> str:
        s = "".join(self._out)
        self._out.clear()
        return s

    def repair(self) -> str:
        closers = '"' if self._quote_open else ""
        for frame in reversed(self._stack):
            closers += "}" if frame[0] == "{" else "]"
        return closers

    # -- reading -------------------------------------------------------------------------------
    def advance(self, buf: str, pos: int, final: bool) -> int:
        n = len(buf)
        while self.status == "more":
            if self._in_str:
                pos = self._read_string(buf, pos)
                if self._in_str:
                    return pos
                continue
            if self._scalar:          # a number or literal starts at pos; consumed once complete
                end = pos
                while end < n and (buf[end] in _NUMBER_CHARS or buf[end].isalpha()):
                    end += 1
                if end == n and not final:
                    return pos
                if self._end_scalar(buf[pos:end]):
                    pos = end
                continue
            if pos == n:
                return pos
            c = buf[pos]
            if c in WS:
                pos += 1
                continue
            if not self._stack:
                pos = self._start_value(c, pos)
                continue
            frame = self._stack[-1]
            kind, state = frame[0], frame[1]
            if state == "value":
                pos = self._start_value(c, pos)
            elif kind == "{":
                if c == '"' and state in ("key_or_end", "key"):
                    self._in_str, self._str_is_key = True, True
                    pos += 1
                elif c == ":" and state == "colon":
                    frame[1] = "value"
                    pos += 1
                elif (c == "," and state == "comma_or_end"):
                    frame[1] = "key"
                    pos += 1
                elif c == "}" and state in ("key_or_end", "comma_or_end"):
                    pos = self._close(pos)
                else:
                    self.status = "error"
            else:
                if c == "]" and state in ("value_or_end", "comma_or_end"):
                    pos = self._close(pos)
                elif c == "," and state == "comma_or_end":
                    frame[1] = "value"
                    pos += 1
                elif state == "value_or_end":
                    frame[1] = "value"
                else:
                    self.status = "error"
        return pos

    def _start_value(self, c: str, pos: int) -> int:
        if self._stack and self._stack[-1][0] == "[":
            self._prefix = ", " if self._stack[-1][2] else ""
        if c == "-" or c in "0123456789" or c in "tfn":
            self._scalar = True        # read by the scalar loop; written with its prefix when complete
            self.first = self.first or c
            return pos
        if c in "{[":
            self._out.append(self._prefix + c)
            self._stack.append([c, "key_or_end" if c == "{" else "value_or_end", 0])
        elif c == '"':
            self._out.append(self._prefix + '"')
            self._in_str, self._str_is_key, self._quote_open = True, False, True
        else:
            self.status = "error"
            return pos
        self._prefix = ""
        self.first = self.first or c
        return pos + 1

    def _end_scalar(self, tok: str) -> bool:
        """Write a complete number or literal; False (status error) when it is neither."""
        self._scalar = False
        text = tok if tok in _LITERALS else _canonical_number(tok)
        if text is None:
            self.status = "error"
            return False
        self._out.append(self._prefix + text)
        self._prefix = ""
        self._value_done()
        return True

    def _close(self, pos: int) -> int:
        kind = self._stack.pop()[0]
        self._out.append("}" if kind == "{" else "]")
        self._value_done()
        return pos + 1

    def _value_done(self) -> None:
        if not self._stack:
            self.status = "done"
            return
        frame = self._stack[-1]
        frame[1] = "comma_or_end"
        frame[2] += 1

    # -- strings -------------------------------------------------------------------------------
    def _read_string(self, buf: str, pos: int) -> int:
        n = len(buf)
        while pos < n:
            if self._esc is not None:
                self._esc += buf[pos]
                pos += 1
                esc = self._esc
                if esc[0] == "u":
                    if len(esc) > 1 and esc[-1] not in _HEX:
                        self.status, self._in_str = "error", False
                        return pos - 1
                    if len(esc) == 5:
                        self._esc = None
                        self._put(chr(int(esc[1:], 16)), escaped=True)
                    continue
                self._esc = None
                if esc not in _SIMPLE_ESCAPES:
                    self.status, self._in_str = "error", False
                    return pos - 1
                self._put(_SIMPLE_ESCAPES[esc], escaped=False)
                continue
            c = buf[pos]
            if c == '"':
                self._flush_hi()
                self._in_str = False
                if self._str_is_key:
                    self._end_key()
                else:
                    self._out.append('"')
                    self._quote_open = False
                    self._value_done()
                return pos + 1
            if c == "\\":
                self._esc = ""
                pos += 1
                continue
            m = _STR_RUN.match(buf, pos)
            self._put(m.group(), escaped=False)
            pos = m.end()
        return pos

    def _put(self, text: str, escaped: bool) -> None:
        if self._hi:
            if escaped and "\udc00" <= text <= "\udfff":
                text, self._hi = chr(0x10000 + ((ord(self._hi) - 0xD800) << 10) + (ord(text) - 0xDC00)), ""
            else:
                self._flush_hi()
        if escaped and "\ud800" <= text <= "\udbff":
            self._hi = text
            return
        if self._str_is_key:
            self._key.append(text)
        else:
            self._out.append(canonical_str(text))

    def _flush_hi(self) -> None:
        if self._hi:
            hi, self._hi = self._hi, ""
            if self._str_is_key:
                self._key.append(hi)
            else:
                self._out.append(canonical_str(hi))

    def _end_key(self) -> None:
        frame = self._stack[-1]
        key, self._key = "".join(self._key), []
        self._prefix = (", " if frame[2] else "") + canonical(key) + ": "
        frame[1] = "colon"
