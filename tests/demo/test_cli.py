from __future__ import annotations

import argparse

from tandem_demo.cli import register


def _parser():
    p = argparse.ArgumentParser(prog="tandem")
    register(p.add_subparsers(dest="command", required=True))
    return p


def test_subcommands_parse():
    p = _parser()
    a = p.parse_args(["demo", "build-corpus", "--out", "/tmp/x", "--seed", "3"])
    assert a.demo_command == "build-corpus" and a.seed == 3 and a.out == "/tmp/x"
    a = p.parse_args(["demo", "train-tokenizer", "--vocab-size", "512"])
    assert a.vocab_size == 512
    a = p.parse_args(["demo", "train", "--out", "m", "--size", "draft", "--minutes", "2", "--resume"])
    assert (a.size, a.minutes, a.resume) == ("draft", 2.0, True)
    a = p.parse_args(["demo", "evaluate", "--target", "t", "--draft", "d", "--toolcall-transcripts", "5"])
    assert (a.target, a.draft, a.toolcall_transcripts) == ("t", "d", 5)
    assert all(callable(x.func) for x in (a,))


def test_build_corpus_command(tmp_path, monkeypatch, bible_text, capsys):
    import tandem_demo.corpus as corpus

    monkeypatch.setattr(corpus, "read_bible_text", lambda: bible_text)
    a = _parser().parse_args(["demo", "build-corpus", "--out", str(tmp_path), "--agent-train", "5",
                              "--agent-heldout", "2"])
    a.func(a)
    assert (tmp_path / "manifest.json").is_file() and '"documents": 5' in capsys.readouterr().out
