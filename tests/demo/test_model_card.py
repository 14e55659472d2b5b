"""Model cards are rendered from the files next to the weights: every figure on them comes from those files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tandem.demo.model_card import render_card

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
        log["segments"] = [[1, "python -m tandem.demo.train --minutes 50"],
                           [900, "python -m tandem.demo.train --minutes 70 --resume"]]

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
