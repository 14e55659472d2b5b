"""A few optimizer steps of the tiny size on a tiny corpus: files written, resume continues."""

from __future__ import annotations

import argparse
import json

import pytest
import torch

from tandem_demo.corpus import CorpusConfig, build_corpus
from tandem_demo.tokenizer_train import corpus_texts, save_tokenizer_files, train_tokenizer
from tandem_demo.train import TrainConfig, add_train_args, config_from_args, lr_at, train

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, bible_text):
    root = tmp_path_factory.mktemp("train")
    build_corpus(root / "corpus", CorpusConfig(agent_train=30, agent_heldout=4), bible_text=bible_text)
    tok = train_tokenizer(corpus_texts(root / "corpus"), vocab_size=4096)
    save_tokenizer_files(tok, root / "tokenizer")
    return root


def _cfg(root, steps, resume=False, **kw):
    return TrainConfig(out_dir=str(root / "model"), size="tiny", corpus_dir=str(root / "corpus"),
                       tokenizer_dir=str(root / "tokenizer"), work_dir=str(root / "work"),
                       token_cache=str(root / "tokens"), minutes=None, steps=steps, seq_len=64, batch_size=2,
                       warmup_steps=2, eval_every=2, eval_rows=1, resume=resume, progress=False, **kw)


def test_schedule_warms_up_then_decays():
    cfg = TrainConfig(out_dir="x", lr=1.0, warmup_steps=4, min_lr_ratio=0.1, steps=100)
    assert lr_at(cfg, 0, 0.0) == 0.25 and lr_at(cfg, 3, 0.03) == 1.0
    assert lr_at(cfg, 50, 0.5) == pytest.approx(0.55) and lr_at(cfg, 100, 1.0) == pytest.approx(0.1)


def test_warmup_stable_decay_holds_the_peak_then_decays_over_the_last_share():
    cfg = TrainConfig(out_dir="x", lr=1.0, warmup_steps=4, min_lr_ratio=0.1, steps=100, decay_fraction=0.2)
    assert lr_at(cfg, 3, 0.03) == 1.0 and lr_at(cfg, 50, 0.5) == 1.0 and lr_at(cfg, 80, 0.8) == 1.0
    assert lr_at(cfg, 90, 0.9) == pytest.approx(0.55) and lr_at(cfg, 100, 1.0) == pytest.approx(0.1)
    parser = argparse.ArgumentParser()
    add_train_args(parser)
    assert config_from_args(parser.parse_args(["--out", "x", "--decay-fraction", "0.25"])).decay_fraction == 0.25
    with pytest.raises(SystemExit):
        parser.parse_args(["--out", "x", "--decay-fraction", "0"])


def test_train_then_resume(prepared, bible_text):
    log = train(_cfg(prepared, 4))
    out = prepared / "model"
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                 "generation_config.json", "loss_curve.png", "train_log.json", "README.md", "corpus_manifest.json"):
        assert (out / name).is_file(), name
    assert log["steps"] == 4 and log["tokens"] == 4 * 2 * 64
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == [2, 0]
    first_losses = [x for _, _, x in log["history"]["train"]]

    log2 = train(_cfg(prepared, 6, resume=True))
    assert log2["steps"] == 6
    # the first four steps are the checkpoint's history, not a retraining
    assert [x for _, _, x in log2["history"]["train"]][:4] == first_losses
    assert [s for s, _, _ in log2["history"]["train"]] == [1, 2, 3, 4, 5, 6]

    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(str(out))
    assert sum(p.numel() for p in model.parameters()) == log2["parameters"]

    # resumed on more data (an extra corpus's transcripts) with tool calls weighted: 2 more steps
    build_corpus(prepared / "corpus-drill", CorpusConfig(agent_train=20, agent_heldout=2, layout="drill"),
                 bible_text=bible_text)
    log3 = train(_cfg(prepared, 8, resume=True, tool_call_loss_weight=8.0, decay_fraction=0.25,
                      extra_corpus_dirs=(str(prepared / "corpus-drill"),)))
    assert "held at the peak, then cosine decay over the last 25% of the run" in (out / "README.md").read_text()
    assert log3["steps"] == 8 and [s for s, _, _ in log3["history"]["train"]] == list(range(1, 9))
    assert (prepared / "tokens" / "corpus-drill" / "tokens.agent.train.npz").is_file()
    manifest = json.loads((out / "corpus_manifest.json").read_text())
    assert [m["config"]["layout"] for m in manifest["extra_corpora"]] == ["drill"]


def test_span_mask_covers_replies_through_im_end():
    import numpy as np

    from tandem_demo.train import span_mask

    header, end = [1, 392, 201], 2
    rows = np.array([[7, 7, 2, 1, 392, 201, 5, 6, 2, 1, 336, 201, 4, 2, 1, 392],
                     [1, 392, 201, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9]])
    got = span_mask(rows, header, end).astype(int).tolist()
    assert got[0] == [0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0]   # row starting mid-reply: unknown, 0
    assert got[1] == [0, 0, 0] + [1] * 13


def test_weighted_loss_reduces_to_plain_mean_with_unit_weights():
    from tandem_demo.train import weighted_loss

    g = torch.Generator().manual_seed(0)
    logits, ids = torch.randn(2, 9, 11, generator=g), torch.randint(0, 11, (2, 9), generator=g)
    plain = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
    w, mean = weighted_loss(logits, ids, torch.ones(2, 9))
    assert float(w) == pytest.approx(float(plain)) == pytest.approx(mean)
    weights = torch.ones(2, 9)
    weights[:, 5:] = 0.0          # only the targets at positions 1..4 count
    w, _ = weighted_loss(logits, ids, weights)
    ref = torch.nn.functional.cross_entropy(logits[:, :4].flatten(0, 1), ids[:, 1:5].flatten())
    assert float(w) == pytest.approx(float(ref), rel=1e-5)


def test_loss_weights_rank_tool_calls_over_replies_over_the_rest():
    import numpy as np

    from tandem_demo.train import loss_weights, span_mask

    rows = np.array([[5, 7, 3, 9, 8, 5, 7]])
    assert span_mask(rows, [7], 8).astype(int).tolist() == [[0, 0, 1, 1, 1, 0, 0]]   # open span runs to the end

    class Tok:   # the four special tokens loss_weights looks up
        ids = {"<|im_end|>": 2, "<tool_call>": 7, "</tool_call>": 8}

        def token_to_id(self, s):
            return self.ids[s]

        def encode(self, s):
            return type("E", (), {"ids": [1, 4]})()

    rows = np.array([[6, 1, 4, 9, 7, 3, 8, 2, 6]])
    w = loss_weights(TrainConfig(out_dir="x", assistant_loss_weight=4.0, tool_call_loss_weight=8.0), rows, Tok())
    assert w.tolist() == [[1, 1, 1, 4, 4, 8, 8, 4, 1]]
    assert loss_weights(TrainConfig(out_dir="x"), rows, Tok()).tolist() == [[1.0] * 9]


def test_span_mask_equals_the_token_by_token_reading():
    """The vectorized mask against the plain reading: inside from after a header through the next end."""
    import random

    import numpy as np

    from tandem_demo.train import span_mask

    def loop(rows, header, end_id):
        mask, h = np.zeros(rows.shape, dtype=bool), len(header)
        for b, row in enumerate(rows.tolist()):
            inside = False
            for j, t in enumerate(row):
                if inside:
                    mask[b, j], inside = True, t != end_id
                elif j >= h - 1 and row[j - h + 1: j + 1] == header:
                    inside = True
        return mask

    rng = random.Random(0)
    for _ in range(200):
        rows = np.array([[rng.choice([1, 2, 3, 4, 9]) for _ in range(rng.randint(1, 40))]] * 1)
        for header in ([1], [1, 2], [1, 2, 3]):
            assert (span_mask(rows, header, 9) == loop(rows, header, 9)).all(), (rows, header)
