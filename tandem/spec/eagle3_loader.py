"""An EAGLE-3 head's directory: config.json (Eagle3Config, the target it was trained against)
and model.safetensors (the head's own weights). Loading checks that the target serving now is
that target: a head trained on another model's hidden states drafts garbage, silently, so a
mismatch is refused with what to do about it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from tandem.errors import ModelLoadError
from tandem.models.checksums import verify_checkpoint
from tandem.spec.eagle3_head import Eagle3Config, Eagle3Head, TargetSignature, default_aux_layers

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


def target_fingerprint(model: torch.nn.Module) -> str:
    """A digest of the target's token embedding and final norm, in bfloat16 (so a float32 load of
    bfloat16 weights gives the same digest): any retraining changes it."""
    h = hashlib.sha256()
    for t in (model.model.embed_tokens.weight, model.model.norm.weight):
        h.update(str(tuple(t.shape)).encode())
        h.update(t.detach().to("cpu", torch.bfloat16).contiguous().view(torch.int16).numpy().tobytes())
    return h.hexdigest()[:16]


def config_for_target(model: torch.nn.Module, aux_layers: tuple[int, ...] | None = None,
                      model_file_sha: str = "", training: dict | None = None) -> Eagle3Config:
    """A head of the target's width, heads and MLP size, reading `aux_layers` (default: low,
    middle, high)."""
    arch = model.arch
    return Eagle3Config(
        hidden_size=arch.hidden_size, num_heads=arch.num_heads, num_kv_heads=arch.num_kv_heads,
        head_dim=arch.head_dim, intermediate_size=arch.intermediate_size,
        aux_layers=tuple(aux_layers) if aux_layers is not None else default_aux_layers(arch.num_layers),
        target=TargetSignature(arch.hidden_size, arch.num_layers, arch.vocab_size,
                               target_fingerprint(model), model_file_sha),
        rms_norm_eps=arch.rms_norm_eps, max_position_embeddings=arch.max_position_embeddings,
        training=training or {})


def check_target(cfg: Eagle3Config, model: torch.nn.Module, head_path: str) -> None:
    """Raise ModelLoadError unless `model` is the target the head was trained against."""
    arch, want = model.arch, cfg.target
    if not hasattr(model, "forward_aux"):
        raise ModelLoadError(f"the EAGLE-3 head {head_path} needs a target whose forward exposes "
                             f"hidden states (forward_aux); {type(model).__name__} does not")
    have = (arch.hidden_size, arch.num_layers, arch.vocab_size)
    if have != (want.hidden_size, want.num_layers, want.vocab_size):
        raise ModelLoadError(
            f"the EAGLE-3 head {head_path} was trained for a target with hidden size "
            f"{want.hidden_size}, {want.num_layers} layers and {want.vocab_size} tokens; this target has "
            f"{have[0]}, {have[1]} and {have[2]}: train a head for it (python -m tandem_demo.eagle3_train)")
    got = target_fingerprint(model)
    if got != want.fingerprint:
        raise ModelLoadError(
            f"the EAGLE-3 head {head_path} was trained against other target weights (fingerprint "
            f"{want.fingerprint}, model.safetensors {want.model_file_sha or 'unknown'}); this target's "
            f"fingerprint is {got}: retrain the head against it (python -m tandem_demo.eagle3_train)")


def load_head(path: str, target_model: torch.nn.Module, dtype: torch.dtype,
              device: torch.device, verify: bool = True) -> Eagle3Head:
    """`verify`: check the files its checksums.sha256 lists, when it has one (tandem/models/checksums.py)."""
    root = Path(path)
    if verify and root.is_dir():
        verify_checkpoint(root)
    if not (root / CONFIG_FILE).is_file() or not (root / WEIGHTS_FILE).is_file():
        raise ModelLoadError(f"{path} is not an EAGLE-3 head directory (needs {CONFIG_FILE} and {WEIGHTS_FILE})")
    cfg = Eagle3Config.from_file(root / CONFIG_FILE)
    check_target(cfg, target_model, path)
    bad = [i for i in cfg.aux_layers if not 0 <= i < cfg.target.num_layers]
    if bad:
        raise ModelLoadError(f"{path}: aux_layers {list(cfg.aux_layers)} outside the target's {cfg.target.num_layers} layers")
    head = Eagle3Head(cfg, device)
    state = {k: v.to(dtype) for k, v in load_file(str(root / WEIGHTS_FILE)).items()}
    missing, unexpected = head.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ModelLoadError(f"{path}: weights do not match the head's config "
                             f"(missing {sorted(missing)}, unexpected {sorted(unexpected)})")
    return head.to(device=device, dtype=dtype).eval()


def save_head(head: Eagle3Head, path: str, dtype: torch.dtype = torch.bfloat16) -> None:
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    (root / CONFIG_FILE).write_text(head.cfg.to_json() + "\n")
    state = {k: v.detach().to("cpu", dtype).contiguous() for k, v in head.state_dict().items()}
    save_file(state, str(root / WEIGHTS_FILE))
