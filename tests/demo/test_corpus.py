from __future__ import annotations

import json

import pytest

from tandem_demo.corpus import CorpusConfig, build_corpus, load_texts, read_jsonl

SMALL = CorpusConfig(seed=5, agent_train=60, agent_heldout=15, kjv_heldout_fraction=0.1)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, bible_text):
    out = tmp_path_factory.mktemp("corpus")
    return out, build_corpus(out, SMALL, bible_text=bible_text)


def test_build_is_deterministic(tmp_path, corpus, bible_text):
    _, first = corpus
    again = build_corpus(tmp_path, SMALL, bible_text=bible_text)
    assert again == first
    other = build_corpus(tmp_path / "other", CorpusConfig(seed=6, agent_train=60, agent_heldout=15,
                                                          kjv_heldout_fraction=0.1), bible_text=bible_text)
    assert other["files"]["agent.train.jsonl"]["sha256"] != first["files"]["agent.train.jsonl"]["sha256"]


def test_counts_and_manifest(corpus):
    out, m = corpus
    assert m["files"]["agent.train.jsonl"]["documents"] == 60
    assert m["files"]["agent.heldout.jsonl"]["documents"] == 15
    assert m["files"]["kjv.heldout.jsonl"]["documents"] == 2     # 10% of 20 chapters
    assert m["files"]["kjv.train.jsonl"]["documents"] == 18
    assert json.loads((out / "manifest.json").read_text()) == m
    assert 0.0 < m["agent_share_of_train_characters"] < 1.0


def test_splits_are_disjoint(corpus):
    out, _ = corpus
    train_refs = {r["ref"] for r in read_jsonl(out / "kjv.train.jsonl")}
    held_refs = {r["ref"] for r in read_jsonl(out / "kjv.heldout.jsonl")}
    assert held_refs and not train_refs & held_refs
    train_texts = set(load_texts(out, "agent", "train"))
    held_texts = load_texts(out, "agent", "heldout")
    assert len(set(held_texts)) == len(held_texts) and not train_texts & set(held_texts)


def test_transcripts_quote_only_training_chapters(corpus):
    out, _ = corpus
    held_verses = {line.split(" ", 1)[1] for r in read_jsonl(out / "kjv.heldout.jsonl")
                   for line in r["text"].splitlines()[1:]}
    train_verses = {line.split(" ", 1)[1] for r in read_jsonl(out / "kjv.train.jsonl")
                    for line in r["text"].splitlines()[1:]}
    only_held = held_verses - train_verses
    for split in ("train", "heldout"):
        for text in load_texts(out, "agent", split):
            assert not any(v in text for v in only_held)


def test_rendered_transcripts_use_the_chat_format(corpus):
    out, _ = corpus
    for text in load_texts(out, "agent", "train"):
        assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_end|>\n")
