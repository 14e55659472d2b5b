"""The King James Bible from Debian's bible-kjv package, parsed into chapters of verses."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

from tandem.errors import TandemError

_HEADER = re.compile(r"^([1-3]?[ ]?[A-Z][A-Za-z ]+) (\d+)$")
_VERSE = re.compile(r"^\s+(\d+) (.*)$")


@dataclass(frozen=True)
class Verse:
    book: str
    chapter: int
    verse: int
    text: str

    @property
    def reference(self) -> str:
        return f"{self.book} {self.chapter}:{self.verse}"


@dataclass(frozen=True)
class Chapter:
    book: str
    chapter: int
    verses: tuple[Verse, ...]

    @property
    def reference(self) -> str:
        return f"{self.book} {self.chapter}"

    def text(self) -> str:
        """'Genesis 1' then one numbered verse per line."""
        return "\n".join([self.reference] + [f"{v.verse} {v.text}" for v in self.verses]) + "\n"


def read_bible_text() -> str:
    """The whole text as printed by `bible Gen1:1-Rev22:21` (raises when bible-kjv is missing)."""
    exe = shutil.which("bible")
    if exe is None:
        raise TandemError("the `bible` command is missing: install it with `apt-get install -y bible-kjv`")
    out = subprocess.run([exe, "Gen1:1-Rev22:21"], check=True, capture_output=True, text=True)
    return out.stdout


def parse_chapters(raw: str) -> list[Chapter]:
    """Chapters in canonical order. A header is a 'Book N' line followed by a blank line;
    verse lines start with indentation and a number; other lines continue the previous verse."""
    lines = raw.splitlines()
    chapters: list[Chapter] = []
    book, num, verses = None, 0, []   # verses: list of [number, text]

    def flush():
        if book is not None and verses:
            chapters.append(Chapter(book, num, tuple(Verse(book, num, n, " ".join(t.split()))
                                                     for n, t in verses)))

    for i, line in enumerate(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        header = _HEADER.match(line)
        if header and not nxt.strip():
            flush()
            book, num, verses = header.group(1), int(header.group(2)), []
            continue
        verse = _VERSE.match(line)
        if verse:
            verses.append([int(verse.group(1)), verse.group(2)])
        elif line.strip() and verses:
            verses[-1][1] += " " + line.strip()
    flush()
    return chapters
