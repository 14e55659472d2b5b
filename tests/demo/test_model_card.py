"""Model cards are rendered from the files next to the weights: every figure on them comes from those files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tandem_demo.model_card import render_card

SHIPPED = Path(__file__).resolve().parents[2] / "models" / "tandem-demo-target"


@pytest.fixture
def model_dir(tmp_path):
    for name in ("config.json", "train_log.json", "corpus_manifest.json", "eval_results.json"):
        shutil.copy(SHIPPED / name, tmp_path / name)
    return tmp_path


def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_card_states_the_training_recipe(model_dir):
    def recipe(log):
        log["config"].update(assistant_loss_weight=4.0, tool_call_loss_weight=8.0)
        log["segments"] = [[1, "python -m tandem_demo.train --minutes 50"],
                           [900, "python -m tandem_demo.train --minutes 70 --resume"]]

    def extra(manifest):
        manifest["extra_corpora"] = [{"config": {"layout": "drill", "seed": 99},
                                      "files": {"agent.train.jsonl": {"documents": 16000}}}]

    _edit(model_dir / "train_log.json", recipe)
    _edit(model_dir / "corpus_manifest.json", extra)
    card = render_card(model_dir, "target")
    assert "replies weighted 4.0x and tokens from `<tool_call>` to `</tool_call>` 8.0x" in card
    assert "layout `drill`, seed 99): 16000 transcripts" in card
    assert "resumed from its checkpoint at step 900)" in card
    assert card.index("--minutes 50") < card.index("--minutes 70 --resume") < card.index("## Evaluation")


def test_copying_limitation_follows_the_measured_share(model_dir):
    def copied(share):
        def change(ev):
            ev["tool_calls"]["argument_values"] = {"values": 400, "copied_share": share}
        return change

    _edit(model_dir / "eval_results.json", copied(0.1))
    low = render_card(model_dir, "target")
    assert "Undertrained for copying" in low and "10.0% of the 400 reference string values" in low
    _edit(model_dir / "eval_results.json", copied(0.9))
    high = render_card(model_dir, "target")
    assert "Undertrained for copying" not in high and "90.0% of the 400 reference string values" in high


def test_pipeline_trains_the_tokenizer_where_the_run_read_it(model_dir):
    _edit(model_dir / "train_log.json", lambda log: log["config"].update(tokenizer_dir="/data/run7/tokenizer"))
    card = render_card(model_dir, "target")
    assert "train-tokenizer --corpus /tmp/tandem-demo/corpus-dense --out /data/run7/tokenizer\n" in card


def _unseen(valid: float) -> dict:
    part = {"call_turns": 10, "valid_share": valid, "right_tool_share": valid, "exact_share": valid / 2,
            "sample_failures": []}
    words = {"word_turns": 20, "no_call_share": 1.0, "sample_failures": []}
    return {"call_turns": 90, "valid_share": valid, "right_tool_share": valid, "exact_share": valid / 2,
            "generated": part, "handwritten": part, "tools_offered_no_call": words, "no_tools_offered": words}


def test_card_states_unseen_tool_figures_against_the_replaced_target(model_dir):
    def figures(ev):
        ev["unseen_tools"] = _unseen(0.85)
        ev["baseline"] = {"model": "/old/target", "tool_calls": ev["tool_calls"], "unseen_tools": _unseen(0.0)}
        ev["config"]["baseline_dir"] = "/old/target"

    _edit(model_dir / "eval_results.json", figures)
    card = render_card(model_dir, "target")
    assert "85.0% of 90 tool-call turns over tools whose names never occur in training" in card
    assert "100.0% of 20 turns with no tools offered hold no call" in card
    assert "| previous |" in card and "| 0.0% | 0.0% |" in card and "| this one |" in card
    assert "--baseline /old/target" in card


def test_card_of_a_fine_tuned_model_lists_the_starting_run_then_the_fine_tune(model_dir):
    def init(log):
        log["config"].update(init_from="/old/target", corpus_dir="/c/pool", tokenizer_dir="/c/tok",
                             extra_corpus_dirs=["/c/dense"])
        log["segments"] = [[1, "python -m tandem_demo.train --init-from /old/target --minutes 30"]]
        log["init"] = {"from": "/old/target", "segments": [[1, "python -m tandem_demo.train --minutes 48"]],
                       "train_minutes": 48.0, "tokens": 15e6, "total_minutes_with_init": 78.0}

    def manifest(m):
        m["config"].update(layout="pool", agent_train=30000)
        m["extra_corpora"] = [{"config": {"layout": "dense", "seed": 1234, "agent_train": 4000},
                               "files": {"agent.train.jsonl": {"documents": 4000}}}]

    _edit(model_dir / "train_log.json", init)
    _edit(model_dir / "corpus_manifest.json", manifest)
    card = render_card(model_dir, "target")
    assert "then fine-tuned to read the tools it is offered" in card
    assert "78.0 minutes of training in all" in card
    order = ["--minutes 48", "build-corpus --layout dense --agent-train 4000 --out /c/dense",
             "build-corpus --layout pool --agent-train 30000 --out /c/pool", "--init-from /old/target --minutes 30"]
    assert [card.index(x) for x in order] == sorted(card.index(x) for x in order)
    assert "cp /old/target/tokenizer* /old/target/chat_template.jinja" in card


def test_card_of_a_model_fine_tuned_from_the_one_it_replaces(model_dir):
    """The run read the previous model from the directory the new one is shipped in: the card
    says which commit holds it, and copies no tokenizer onto itself."""
    def init(log):
        log["config"].update(init_from="models/t", corpus_dir="/c/pool", tokenizer_dir="models/t")
        log["segments"] = [[1, "python -m tandem_demo.train --init-from models/t --minutes 30"]]
        log["init"] = {"from": "models/t", "commit": "504f7e8", "train_minutes": 48.0, "tokens": 15e6,
                       "segments": [[1, "python -m tandem_demo.train --minutes 48"]],
                       "total_minutes_with_init": 78.0}

    _edit(model_dir / "train_log.json", init)
    card = render_card(model_dir, "target")
    assert "# (or, as committed: git checkout 504f7e8 -- models/t)" in card
    assert "cp models/t/tokenizer*" not in card
