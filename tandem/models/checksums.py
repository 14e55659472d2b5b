"""A checkpoint's checksum manifest: SHA-256 of every file tandem reads to load it.

The manifest is `checksums.sha256` in the model directory, in `sha256sum`'s format
("<64 hex digits>  <file name>" a line), so `sha256sum -c checksums.sha256` checks it too. The
code that writes a checkpoint (tandem_demo's training and export) writes it last; loading checks
every file it lists, streaming each file through SHA-256 (about 1-2 GB/s on one core: ~10 ms for
the demo models, seconds per 10 GB), and refuses on the first mismatch, naming the file and both
digests. A directory without a manifest (any Hugging Face checkpoint) loads unchecked, as before.
Files present but not listed are not checked (a model card may change after the weights).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

from tandem.errors import ModelLoadError

MANIFEST = "checksums.sha256"
# the files a checkpoint is loaded from (weights, config, tokenizer, chat template); reports a
# training run writes beside them (train_log.json, eval_results.json, the card) are not listed
_LOADED_JSON = frozenset({"config.json", "generation_config.json", "tokenizer.json",
                          "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                          "vocab.json", "model.safetensors.index.json", "chat_template.json"})
_LOADED_SUFFIXES = (".safetensors", ".jinja")
_LOADED_NAMES = frozenset({"tokenizer.model", "merges.txt"})
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Verified:
    files: int          # files checked (0: no manifest)
    bytes: int
    seconds: float


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def loaded_files(model_dir: Path) -> list[Path]:
    """The files of `model_dir` that loading reads, sorted by name."""
    return sorted(p for p in Path(model_dir).iterdir() if p.is_file() and (
        p.name in _LOADED_JSON or p.name in _LOADED_NAMES or p.name.endswith(_LOADED_SUFFIXES)))


def write_manifest(model_dir: str | Path) -> Path:
    """Write `checksums.sha256` over the loaded files as they are now; returns its path."""
    root = Path(model_dir)
    lines = [f"{file_sha256(p)}  {p.name}\n" for p in loaded_files(root)]
    out = root / MANIFEST
    out.write_text("".join(lines))
    return out


def read_manifest(model_dir: Path) -> dict[str, str] | None:
    """{file name: hex digest}, or None when the directory has no manifest."""
    path = Path(model_dir) / MANIFEST
    if not path.is_file():
        return None
    entries: dict[str, str] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        digest, sep, name = line.partition("  ")
        name = name.removeprefix("*")     # sha256sum's binary-mode marker
        if not sep or len(digest) != 64 or not name or "/" in name or name.startswith("."):
            raise ModelLoadError(f"{path} line {n} is not '<sha256 hex>  <file name>': {line!r}")
        entries[name] = digest.lower()
    return entries


def verify_checkpoint(model_dir: str | Path) -> Verified:
    """Check every file the manifest lists; raise ModelLoadError naming the first that is
    missing or whose SHA-256 differs from the recorded one. No manifest: nothing to check."""
    root = Path(model_dir)
    entries = read_manifest(root)
    if entries is None:
        return Verified(0, 0, 0.0)
    start = time.perf_counter()
    size = 0
    for name, want in entries.items():
        path = root / name
        if not path.is_file():
            raise ModelLoadError(f"checkpoint file {path} is missing (listed in {MANIFEST})")
        got = file_sha256(path)
        if got != want:
            raise ModelLoadError(
                f"checkpoint file {path} does not match its recorded checksum: {MANIFEST} says "
                f"sha256 {want}, the file has {got}; the file is corrupt or was changed after the "
                f"checkpoint was written (download it again, or --no-verify-checksums to load it anyway)")
        size += path.stat().st_size
    return Verified(len(entries), size, time.perf_counter() - start)
