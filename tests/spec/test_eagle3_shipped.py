"""The shipped head loads against the shipped demo target (a retrained target needs a retrained
head: the loader refuses it, and so does this test, with the command to run)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tandem.config import ModelConfig
from tandem.models.loader import load_model
from tandem.spec.eagle3_loader import load_head

ROOT = Path(__file__).resolve().parents[2] / "models"


@pytest.mark.skipif(not (ROOT / "tandem-demo-eagle3" / "config.json").exists(), reason="no shipped head")
def test_the_shipped_head_fits_the_shipped_target():
    target = load_model(ModelConfig(path=str(ROOT / "tandem-demo-target"), dtype="float32", show_progress=False))
    head = load_head(str(ROOT / "tandem-demo-eagle3"), target.model, torch.float32, torch.device("cpu"))
    assert head.cfg.aux_layers == (1, 3, 5)
