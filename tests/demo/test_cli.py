from __future__ import annotations

import subprocess
import sys

from tandem_demo.cli import build_parser


def test_subcommands_parse():
    p = build_parser()
    a = p.parse_args(["build-corpus", "--out", "/tmp/x", "--seed", "3"])
    assert a.command == "build-corpus" and a.seed == 3 and a.out == "/tmp/x"
    a = p.parse_args(["train-tokenizer", "--vocab-size", "512"])
    assert a.vocab_size == 512
    a = p.parse_args(["train", "--out", "m", "--size", "draft", "--minutes", "2", "--resume"])
    assert (a.size, a.minutes, a.resume) == ("draft", 2.0, True)
    a = p.parse_args(["evaluate", "--target", "t", "--draft", "d", "--toolcall-transcripts", "5"])
    assert (a.target, a.draft, a.toolcall_transcripts) == ("t", "d", 5)
    assert all(callable(x.func) for x in (a,))


def test_build_corpus_command(tmp_path, monkeypatch, bible_text, capsys):
    import tandem_demo.corpus as corpus

    monkeypatch.setattr(corpus, "read_bible_text", lambda: bible_text)
    a = build_parser().parse_args(["build-corpus", "--out", str(tmp_path), "--agent-train", "5",
                                   "--agent-heldout", "2"])
    a.func(a)
    assert (tmp_path / "manifest.json").is_file() and '"documents": 5' in capsys.readouterr().out


def test_the_package_runs_as_a_module():
    out = subprocess.run([sys.executable, "-m", "tandem_demo", "train", "--help"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: python -m tandem_demo train") and "--tool-call-loss-weight" in out.stdout
