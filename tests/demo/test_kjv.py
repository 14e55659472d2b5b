from __future__ import annotations

import shutil

import pytest

from tandem_demo.kjv import parse_chapters, read_bible_text


def test_parse_fake_bible(bible_text):
    chapters = parse_chapters(bible_text)
    assert [c.reference for c in chapters[:2]] == ["Genesis 1", "Genesis 2"]
    assert {c.book for c in chapters} == {"Genesis", "1 Kings", "Song of Solomon", "John"}
    assert all(len(c.verses) == 6 for c in chapters)
    # wrapped verses are joined into one line with single spaces
    assert all("\n" not in v.text and "  " not in v.text for c in chapters for v in c.verses)
    assert chapters[0].text().startswith("Genesis 1\n1 ")


@pytest.mark.skipif(shutil.which("bible") is None, reason="bible-kjv is not installed")
def test_real_kjv_has_every_verse():
    chapters = parse_chapters(read_bible_text())
    assert len(chapters) == 1189
    assert sum(len(c.verses) for c in chapters) == 31102
    assert chapters[0].verses[0].text == "In the beginning God created the heaven and the earth."
    assert chapters[-1].verses[-1].reference == "Revelation 22:21"
