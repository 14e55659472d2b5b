"""Base of the tool-call parsers: one `ToolStream` per request turns text deltas into events, and
`ToolParser` describes a format (name, markers, special-token needs) and makes streams.

How a stream works. The text received and not yet decided sits in `_buf` from `_pos`; a state
method (`_state`) consumes from `_pos`, writes events and returns True while it makes progress.
A state never decides on text it has not seen: when the decision needs more characters (a marker
cut in two, a name not yet ended, a number not yet ended) it returns False and waits for the next
delta, or for `finish()` (`_final`), which tells every state that no more text will come. So the
events are the same however the text is split, and `parse(text)` is `collect(feed(text) + finish())`:
the streamed and non-streamed results agree by construction.

A call block goes through two phases:
- uncommitted: from its start marker until its name is known and its arguments have started. Its raw
  text is kept (`_block` marks where it began). If it turns out malformed, or the text ends first,
  the whole raw block (markers included) is written as content (`_fail`): nothing is lost.
- committed: `ToolCallStart` was sent, and the canonical arguments stream as fragments. If the
  arguments then break or the text ends inside them, the call is closed with the closers that make
  its arguments valid JSON (`_abort`), and the text after the error, up to the block's end marker,
  is content. A committed call is never taken back, so both paths return it.

Content: text outside calls, with the markup removed (`drop_markers`, e.g. a `</tool_call>` or a
section marker). Calls and removed markup cut the content into segments; a segment that is only
whitespace (the newlines between calls) is dropped, any other is kept verbatim (`SegmentWriter`).
"""

from __future__ import annotations

from dataclasses import dataclass

from tandem.parsers.events import (
    ContentDelta, Event, IdFactory, ParsedTools, ToolCallArguments, ToolCallStart, collect,
    random_call_id,
)
from tandem.parsers.json_stream import WS, JsonValueStream
from tandem.parsers.text import MarkerScanner, SegmentWriter

Tools = list[dict] | None   # the request's `tools`, OpenAI format


class ToolStream:
    call_markers: tuple[str, ...] = ()   # open a call block
    drop_markers: tuple[str, ...] = ()   # markup removed from content
    end_markers: tuple[str, ...] = ()    # end a call block; recovery after an error runs up to one
    extra_markers: tuple[str, ...] = ()  # other markup inside a block (listed for `ToolParser.markers`)

    def __init__(self, tools: Tools = None, new_id: IdFactory = random_call_id) -> None:
        self.tools = list(tools or [])
        self.new_id = new_id
        self._buf = ""
        self._pos = 0
        self._final = False
        self._out: list[Event] = []
        self._content = SegmentWriter(self._out, ContentDelta)
        self._n_calls = 0
        self._block: int | None = None      # start of the uncommitted call block in _buf
        self._until: tuple[str, ...] = ()   # during recovery: markers that end the raw run
        self._write_until = False           # ...and whether that marker is written as content
        self._scanner = MarkerScanner(self.call_markers + self.drop_markers)
        self._raw_scanner = MarkerScanner(self.call_markers + self.end_markers)
        self._state = self._initial_state()

    # -- public --------------------------------------------------------------------------------
    def feed(self, delta: str) -> list[Event]:
        self._buf += delta
        self._run()
        return self._take()

    def finish(self) -> list[Event]:
        self._final = True
        self._run()
        if self._pos < len(self._buf):          # defensive: never lose text
            self._content.write(self._buf[self._pos:])
            self._pos = len(self._buf)
        self._content.end_segment()
        return self._take()

    @property
    def num_calls(self) -> int:
        return self._n_calls

    # -- machinery -----------------------------------------------------------------------------
    def _initial_state(self):
        return self._scan

    def _run(self) -> None:
        while self._state():
            pass
        keep = self._pos if self._block is None else min(self._pos, self._block)
        if keep:
            self._buf = self._buf[keep:]
            self._pos -= keep
            if self._block is not None:
                self._block -= keep

    def _take(self) -> list[Event]:
        out = list(self._out)
        self._out.clear()
        return out

    def _scan(self) -> bool:
        """Content: write text up to the next marker; a call marker starts a call block."""
        buf, pos = self._buf, self._pos
        scanner = self._raw_scanner if self._until else self._scanner
        hit = scanner.search(buf, pos)
        if hit is None:
            end = len(buf) if self._final else len(buf) - scanner.held(buf, pos)
            if end <= pos:
                return False
            self._content.write(buf[pos:end])
            self._pos = end
            return True
        at, marker = hit
        self._content.write(buf[pos:at])
        self._pos = at + len(marker)
        if self._until and marker in self._until:
            if self._write_until:
                self._content.write(marker)
            self._until = ()
        elif marker in self.call_markers:
            self._until = ()
            self._block = at
            self._state = self._begin_call(marker)
        else:
            self._content.end_segment()      # dropped markup separates segments
        return True

    def _begin_call(self, marker: str):
        """Return the state that reads a call block whose start `marker` was just consumed."""
        raise NotImplementedError

    def _skip_ws(self, j: int | None = None) -> int | None:
        """Index of the next non-space character from j (default _pos), or None when the buffer
        ends first."""
        buf = self._buf
        j = self._pos if j is None else j
        while j < len(buf) and buf[j] in WS:
            j += 1
        return j if j < len(buf) else None

    def _commit(self, name: str, call_id: str | None = None) -> None:
        index = self._n_calls
        self._out.append(ToolCallStart(index, call_id or self.new_id(index), name))
        self._n_calls += 1
        self._block = None
        self._content.end_segment()

    def _args(self, fragment: str) -> None:
        if fragment:
            self._out.append(ToolCallArguments(self._n_calls - 1, fragment))

    @property
    def _committed(self) -> bool:
        return self._block is None

    def _fail(self) -> bool:
        """The uncommitted block is malformed at _pos: its raw text so far, and on up to its end
        marker (written too), is content."""
        self._content.write(self._buf[self._block:self._pos])
        self._block = None
        self._until, self._write_until = self.end_markers, True
        self._state = self._scan
        return True

    def _abort(self, closers: str) -> bool:
        """The committed call broke at _pos (or the text ended): close its arguments; the text
        from _pos up to the block's end marker (dropped) is content."""
        self._args(closers)
        self._until, self._write_until = self.end_markers, False
        self._state = self._scan
        return True

    def _stop(self, closers: str) -> bool:
        """Malformed or truncated at _pos, whichever phase the block is in."""
        return self._abort(closers) if self._committed else self._fail()

    def _call_done(self) -> bool:
        self._state = self._scan
        return True

    def _stream_args(self, after=None) -> bool:
        """Read a JSON arguments value from _pos (the call is committed), streaming its canonical
        form; then go to the state `after` (default: content)."""
        self._json = JsonValueStream()
        self._after_args = after or self._call_done
        self._state = self._json_args
        return True

    def _json_args(self) -> bool:
        js, start = self._json, self._pos
        self._pos = js.advance(self._buf, self._pos, self._final)
        self._args(js.take())
        if js.status == "done":
            return self._after_args()
        if js.status == "error" or self._final:
            return self._abort(js.repair())
        return self._pos > start

    def _literal(self, k: int, lit: str) -> str:
        """Does _buf[k:] start with `lit`: "yes", "no", or "wait" (the buffer ends inside it;
        "no" once the text is final)."""
        rest = self._buf[k:k + len(lit)]
        if rest == lit:
            return "yes"
        return "wait" if lit.startswith(rest) and not self._final else "no"


@dataclass(frozen=True)
class ToolParser:
    """A tool-call format: stateless; `stream()` makes the per-request parser."""

    name: str
    stream_class: type[ToolStream]
    # True when the format's markers are special tokens that `skip_special_tokens=True` would strip
    # from the detokenized text: the server must then decode with skip_special_tokens=False.
    requires_special_tokens: bool
    default_id: IdFactory = random_call_id

    @property
    def start_markers(self) -> tuple[str, ...]:
        return self.stream_class.call_markers

    @property
    def markers(self) -> tuple[str, ...]:
        """Every piece of markup the parser reads (to check against the tokenizer's special tokens)."""
        s = self.stream_class
        return tuple(dict.fromkeys(s.call_markers + s.drop_markers + s.end_markers + s.extra_markers))

    def stream(self, tools: Tools = None, new_id: IdFactory | None = None) -> ToolStream:
        return self.stream_class(tools, new_id or self.default_id)

    def parse(self, text: str, tools: Tools = None, new_id: IdFactory | None = None) -> ParsedTools:
        s = self.stream(tools, new_id)
        out = collect(s.feed(text) + s.finish())
        return ParsedTools(out.content, out.tool_calls)
