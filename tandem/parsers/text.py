"""Small text helpers shared by the streaming parsers: markers cut across deltas, and text writers
whose whitespace rules give the same result however the text was split.

- `held_suffix(text, markers)`: how many trailing characters of `text` could be the start of a marker;
  a parser keeps those back until the next delta decides them.
- `MarkerScanner`: finds the leftmost complete marker (longest first at one position).
- `SegmentWriter`: writes a run of plain text ("segment") as delta events. A segment made only of
  whitespace is dropped (its whitespace is held until a non-space character proves the segment is
  kept, and dropped when the segment ends); otherwise the segment is written verbatim. With
  `strip=True` the segment's leading and trailing whitespace is removed instead (trailing whitespace
  is held until more text follows it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from tandem.parsers.events import Event

_NON_WS = re.compile(r"\S")


def held_suffix(text: str, markers: Sequence[str]) -> int:
    """Length of the longest proper suffix of `text` that is a prefix of one of `markers`."""
    best = 0
    for m in markers:
        for k in range(min(len(m) - 1, len(text)), best, -1):
            if text.endswith(m[:k]):
                best = k
                break
    return best


class MarkerScanner:
    """Leftmost occurrence of any marker; at one position the longest marker wins."""

    def __init__(self, markers: Sequence[str]) -> None:
        self.markers = tuple(sorted(set(markers), key=len, reverse=True))
        self._re = re.compile("|".join(re.escape(m) for m in self.markers)) if self.markers else None

    def search(self, text: str, pos: int) -> tuple[int, str] | None:
        if self._re is None:
            return None
        m = self._re.search(text, pos)
        return (m.start(), m.group()) if m else None

    def held(self, text: str, pos: int) -> int:
        return held_suffix(text[pos:], self.markers)


class SegmentWriter:
    """Writes segments of text as events made by `make` (ContentDelta or ReasoningDelta)."""

    def __init__(self, out: list[Event], make: Callable[[str], Event], strip: bool = False) -> None:
        self._out = out
        self._make = make
        self._strip = strip
        self._held = ""       # whitespace not yet written
        self._seen = False    # the current segment has a non-space character

    def write(self, text: str) -> None:
        if not text:
            return
        if not self._seen:
            m = _NON_WS.search(text)
            if m is None:
                if not self._strip:
                    self._held += text
                return
            self._seen = True
            if self._strip:
                text = text[m.start():]
            else:
                text, self._held = self._held + text, ""
        if self._strip:
            body = text.rstrip()
            if body:
                self._emit(self._held + body)
                self._held = text[len(body):]
            else:
                self._held += text
        else:
            self._emit(text)

    def end_segment(self) -> None:
        self._held = ""
        self._seen = False

    def _emit(self, text: str) -> None:
        if text:
            self._out.append(self._make(text))
