"""Every file or folder docs/architecture.md and the README name exists: `tandem/...`,
`tandem_demo/...`, `tests/...`, `docs/...`, and paths relative to tandem/ (e.g. `api/run.py`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NAMED = re.compile(r"(?<![\w/@.~-])((?:tandem|tandem_demo|tests|docs)/[\w/.-]+)")   # not inside a longer path
QUOTED = re.compile(r"`([^`\s/~@][^`\s]*)`")   # not absolute, home or @cf/ paths
PATH_LIKE = re.compile(r"[\w.-]+(/[\w.-]*)+|[\w-]+\.py")


def missing_paths(doc: Path) -> list[str]:
    text = doc.read_text()
    missing = []
    for token in sorted(set(QUOTED.findall(text)) | set(NAMED.findall(text))):
        token = token.rstrip(".,;:)")
        if not PATH_LIKE.fullmatch(token) or token.startswith(("http", "/", ".")) or token.count("/") > 8:
            continue
        candidates = [ROOT / token, ROOT / "tandem" / token]
        if "/" not in token.rstrip("/"):   # a bare file or folder name: somewhere in the package
            candidates += list((ROOT / "tandem").rglob(token.rstrip("/")))
        if not any(c.exists() for c in candidates):
            missing.append(token)
    return missing


@pytest.mark.parametrize("doc", ["docs/architecture.md", "README.md", "docs/deploy.md"])
def test_the_paths_a_doc_names_exist(doc):
    assert missing_paths(ROOT / doc) == []


def test_a_missing_path_is_found(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("see `tandem/engine/engine.py` and `tandem/engine/nowhere.py`")
    assert missing_paths(doc) == ["tandem/engine/nowhere.py"]
