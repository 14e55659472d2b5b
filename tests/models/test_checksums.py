"""A checkpoint's checksums.sha256 manifest: a file that differs refuses to load, naming the file
and both digests; an intact checkpoint and one without a manifest load; `tandem serve` exits with
the reason, not a traceback."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tandem.config import ModelConfig
from tandem.errors import ModelLoadError
from tandem.models.checksums import MANIFEST, loaded_files, verify_checkpoint, write_manifest
from tandem.models.loader import load_model
from tandem.testing.tiny_model import write_test_model

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    path = write_test_model(tmp_path / "m", hidden_size=32, num_layers=1, vocab_size=300, seed=3)
    write_manifest(path)
    return path


def _flip_last_byte(path: Path) -> str:
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    return hashlib.sha256(data).hexdigest()


def _cfg(path: Path, **kw) -> ModelConfig:
    return ModelConfig(path=str(path), show_progress=False, pack_weights=False, **kw)


def test_manifest_lists_weights_config_and_tokenizer_in_sha256sum_format(ckpt: Path):
    lines = (ckpt / MANIFEST).read_text().splitlines()
    names = [line.split("  ", 1)[1] for line in lines]
    assert {"model.safetensors", "config.json", "tokenizer.json", "chat_template.jinja"} <= set(names)
    assert names == [p.name for p in loaded_files(ckpt)]
    digest = dict(line.split("  ", 1)[::-1] for line in lines)["model.safetensors"]
    assert digest == hashlib.sha256((ckpt / "model.safetensors").read_bytes()).hexdigest()


def test_intact_checkpoint_loads(ckpt: Path):
    assert verify_checkpoint(ckpt).files == len(loaded_files(ckpt))
    assert load_model(_cfg(ckpt)).arch.hidden_size == 32


def test_corrupted_weights_refuse_naming_the_file_and_both_digests(ckpt: Path):
    recorded = hashlib.sha256((ckpt / "model.safetensors").read_bytes()).hexdigest()
    actual = _flip_last_byte(ckpt / "model.safetensors")
    with pytest.raises(ModelLoadError) as err:
        load_model(_cfg(ckpt))
    msg = str(err.value)
    assert "model.safetensors" in msg and recorded in msg and actual in msg


def test_changed_config_refuses_and_missing_file_refuses(ckpt: Path):
    cfg = ckpt / "config.json"
    cfg.write_text(cfg.read_text().replace('"num_hidden_layers": 1', '"num_hidden_layers": 1 '))
    with pytest.raises(ModelLoadError, match="config.json does not match"):
        load_model(_cfg(ckpt))
    write_manifest(ckpt)
    (ckpt / "tokenizer.json").unlink()
    with pytest.raises(ModelLoadError, match=r"tokenizer.json is missing \(listed in checksums.sha256\)"):
        verify_checkpoint(ckpt)


def test_skip_flag_loads_a_changed_checkpoint(ckpt: Path):
    cfg = ckpt / "config.json"
    cfg.write_text(cfg.read_text() + "\n")
    assert load_model(_cfg(ckpt, verify_checksums=False)).arch.hidden_size == 32


def test_checkpoint_without_manifest_loads_as_before(ckpt: Path):
    (ckpt / MANIFEST).unlink()
    _flip_last_byte(ckpt / "generation_config.json")   # nothing records what it was
    assert verify_checkpoint(ckpt).files == 0
    (ckpt / "generation_config.json").write_text("{}")
    assert load_model(_cfg(ckpt)).arch.hidden_size == 32


def test_malformed_manifest_is_a_load_error(ckpt: Path):
    (ckpt / MANIFEST).write_text("not a digest line\n")
    with pytest.raises(ModelLoadError, match="line 1"):
        verify_checkpoint(ckpt)


def test_shipped_demo_models_have_manifests_that_verify():
    for name in ("tandem-demo-target", "tandem-demo-draft", "tandem-demo-eagle3"):
        checked = verify_checkpoint(REPO / "models" / name)
        assert checked.files >= 2 and checked.bytes > 1_000_000, name


def test_serve_exits_with_the_reason_not_a_traceback(ckpt: Path):
    _flip_last_byte(ckpt / "model.safetensors")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "tandem", "serve", "--model", str(ckpt),
                           "--device", "cpu", "--port", "0", "--threads", "1"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 1
    assert "tandem serve: cannot load the model: checkpoint file" in proc.stderr
    assert "model.safetensors does not match its recorded checksum" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_eagle3_head_with_a_changed_file_refuses(tmp_path: Path):
    from tandem.spec.eagle3_loader import load_head
    import shutil
    head = shutil.copytree(REPO / "models" / "tandem-demo-eagle3", tmp_path / "head")
    _flip_last_byte(head / "model.safetensors")
    with pytest.raises(ModelLoadError, match="model.safetensors does not match its recorded checksum"):
        load_head(str(head), None, None, None)   # refused before the target is looked at
