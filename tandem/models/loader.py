"""Load a Hugging Face model directory into a tandem model.

Weights come straight from the memory-mapped safetensors files: when the checkpoint dtype
equals the target dtype and the device is the CPU, the mmapped tensors become the
parameters as they are (no copy; pages load on first use). Otherwise each tensor is
converted / moved once.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open
from tqdm import tqdm

from tandem.config import ModelConfig
from tandem.errors import ModelLoadError
from tandem.layers.linear import PackingThread, can_pack
from tandem.models.arch import ModelArch
from tandem.models.attention_choice import attention_workspace
from tandem.models.checksums import verify_checkpoint
from tandem.models.fingerprint import weights_fingerprint
from tandem.models.fused_choice import fused_ops
from tandem.models.llama import DecoderForCausalLM
from tandem.models.memory import check_fits, estimate_memory
from tandem.models.registry import model_class
from tandem.models.shard_plan import ShardPlan
from tandem.models.triton_choice import moe_kernel

log = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# checkpoint entries that are derived state, not weights
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


@dataclass
class LoadedModel:
    model: DecoderForCausalLM          # eval mode, on cfg.device, in `dtype`
    arch: ModelArch
    dtype: torch.dtype
    eos_token_ids: tuple[int, ...]     # generation_config.json, else config.json
    generation_defaults: dict = field(default_factory=dict)  # generation_config.json as is
    name: str = ""                     # served name
    path: str = ""
    max_model_len: int = 0             # see ModelArch.context_length: configured, capped by a sliding window
    weights_id: str = ""               # tandem/models/fingerprint.py: which weights (not only which shape)
    packing: PackingThread | None = None  # packs the linear weights while the model already serves
    # decode batch sizes to capture as CUDA graphs (ModelConfig.cuda_graph_sizes; () with
    # enforce_eager); the runner decides whether they can run (tandem/runner/graph_policy.py)
    cuda_graph_sizes: tuple[int, ...] = ()
    num_ranks: int = 1                 # processes sharing the weights (a parallel worker's ranks)

    def wait_packed(self) -> None:
        """Block until the background weight packing (if any) has finished."""
        if self.packing is not None:
            self.packing.join()


def load_model(cfg: ModelConfig, shard: Callable[[DecoderForCausalLM], ShardPlan] | None = None,
               num_ranks: int = 1) -> LoadedModel:
    """`shard` (a parallel worker's rank): reshapes the model built on the meta device to the
    rank's part and says which slices of the checkpoint it loads; `num_ranks` share the weights."""
    path = Path(cfg.path)
    if not path.is_dir():
        raise ModelLoadError(f"model directory not found: {path}")
    if cfg.verify_checksums:   # before any file is parsed
        checked = verify_checkpoint(path)
        if checked.files:
            log.info("checksums: %d files, %.1f MB verified in %.2f s", checked.files,
                     checked.bytes / 1e6, checked.seconds)
    arch = ModelArch.from_dir(path)
    cls = model_class(arch.architecture)
    device = torch.device(cfg.device)
    dtype = resolve_dtype(cfg.dtype, arch, device)
    estimate = estimate_memory(arch, dtype, num_ranks)
    check_fits(estimate, device)   # before any weight is read
    log.info("loading %s", estimate.describe())
    if arch.quantization is not None:
        raise ModelLoadError(f"{path} holds {arch.quantization}-quantized weights "
                             "(config.json quantization_config); tandem loads bfloat16, float16 "
                             "or float32 checkpoints only: dequantize it first")
    files = safetensors_files(path)
    with torch.device("meta"):
        model = cls(arch, device=device)
        plan = shard(model) if shard is not None else ShardPlan()
    load_weights(model, files, dtype, device, cfg.show_progress, plan)
    model.workspace = attention_workspace(cfg.attention, dtype, device)
    model.use_fused_ops(fused_ops(cfg.fused_layers, dtype, device))
    if arch.moe is not None:
        model.use_moe_kernel(moe_kernel(cfg.moe_kernel, dtype, device))
    model.eval()
    packing = None
    if cfg.pack_weights and can_pack(dtype, device):
        packing = PackingThread(model)   # off the start-up path; outputs are the same either way
        packing.start()
    gen = read_generation_config(path)
    eos = _as_ids(gen.get("eos_token_id")) or arch.eos_token_ids
    return LoadedModel(
        model=model,
        arch=arch,
        dtype=dtype,
        eos_token_ids=eos,
        generation_defaults=gen,
        name=cfg.served_name or path.resolve().name,
        path=str(path),
        max_model_len=arch.context_length(cfg.max_model_len or None),
        packing=packing,
        weights_id=weights_fingerprint(files),
        cuda_graph_sizes=() if cfg.enforce_eager else tuple(cfg.cuda_graph_sizes),
        num_ranks=num_ranks,
    )


def resolve_dtype(name: str, arch: ModelArch, device: torch.device) -> torch.dtype:
    """'auto' keeps the checkpoint's dtype (float32 when the config names none), except a
    float16 checkpoint on the CPU, which runs in bfloat16 (as vLLM's CPU backend does: same
    range of weights as trained in most cases, and the fast CPU paths are bfloat16 ones)."""
    if name == "auto":
        name = (arch.torch_dtype or "float32").removeprefix("torch.")
        if name == "float16" and device.type == "cpu":
            log.info("float16 checkpoint on the CPU: running it in bfloat16 (--dtype float16 to keep it)")
            name = "bfloat16"
    name = name.removeprefix("torch.")
    if name not in _DTYPES:
        raise ModelLoadError(f"unsupported dtype {name!r}; supported: auto, " + ", ".join(_DTYPES))
    return _DTYPES[name]


def safetensors_files(path: Path) -> list[Path]:
    """The checkpoint's shards: from model.safetensors.index.json, else model.safetensors, else
    every *.safetensors but Mistral's consolidated.safetensors."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text()).get("weight_map", {})
        files = [path / name for name in sorted(set(weight_map.values()))]
        for f in files:
            if not f.is_file():
                raise ModelLoadError(f"missing file {f} (listed in {index.name})")
        return files
    if (path / "model.safetensors").is_file():
        return [path / "model.safetensors"]
    files = sorted(path.glob("*.safetensors"))
    # Mistral's repositories ship their own format (consolidated.safetensors) beside HF's
    hf_files = [f for f in files if not f.name.startswith("consolidated")]
    if not files:
        raise ModelLoadError(f"missing file {path / 'model.safetensors'}: no *.safetensors in {path}")
    return hf_files or files


def load_weights(model: DecoderForCausalLM, files: list[Path], dtype: torch.dtype,
                 device: torch.device, show_progress: bool, plan: ShardPlan = ShardPlan()) -> None:
    params = dict(model.named_parameters())
    loaded: set[str] = set()
    tied = model.arch.tie_word_embeddings
    float32 = model.float32_params   # name suffixes kept in float32 (endswith(()) is False)
    handles = [safe_open(str(f), framework="pt", device="cpu") for f in files]
    total = sum(len(h.keys()) for h in handles)
    with tqdm(total=total, desc="loading weights", unit="tensor", file=sys.stderr,
              disable=not show_progress) as bar:
        for f, h in zip(files, handles):
            for name in h.keys():
                bar.update(1)
                if name.endswith(_IGNORED_SUFFIXES) or (tied and name == "lm_head.weight"):
                    continue
                saved, name = name, model.checkpoint_name(name, model.arch)
                if name is not None:
                    name = plan.local_name(name)
                if name is None:
                    continue    # not this model's (DeepSeek's multi-token prediction) or this rank's
                if name not in params:
                    raise ModelLoadError(f"unexpected weight {saved!r} in {f.name} for "
                                         f"{model.arch.architecture}")
                tensor = _read(h, saved, plan.slices.get(name))
                expected = params[name].shape
                if tensor.shape != expected:
                    raise ModelLoadError(f"weight {saved!r} in {f.name} has shape {tuple(tensor.shape)}, "
                                         f"config implies {tuple(expected)}")
                # .to() returns the mmapped tensor itself when dtype and device already match
                keep = torch.float32 if name.endswith(float32) else dtype
                _set_param(model, name, tensor.to(device=device, dtype=keep))
                loaded.add(name)
    if tied and model.lm_head is not None:   # a parallel rank may hold neither (tandem.parallel)
        model.lm_head.weight = model.model.embed_tokens.weight
        loaded.add("lm_head.weight")
    missing = sorted(set(params) - loaded)
    if missing:
        raise ModelLoadError(f"checkpoint lacks {len(missing)} weights, e.g. {missing[:5]}")


def _read(handle, name: str, part: tuple[int, int, int] | None) -> torch.Tensor:
    """The tensor, or only part `index` of `count` along `dim` (read from the file as such)."""
    if part is None:
        return handle.get_tensor(name)
    dim, index, count = part
    sl = handle.get_slice(name)
    size = sl.get_shape()[dim]
    if size % count:
        raise ModelLoadError(f"weight {name!r}: dimension {dim} of size {size} does not split into {count} ranks")
    step = size // count
    index_expr = [slice(None)] * len(sl.get_shape())
    index_expr[dim] = slice(index * step, (index + 1) * step)
    return sl[tuple(index_expr)]


def _set_param(model: torch.nn.Module, name: str, tensor: torch.Tensor) -> None:
    owner_name, _, attr = name.rpartition(".")
    owner = model.get_submodule(owner_name)
    setattr(owner, attr, torch.nn.Parameter(tensor, requires_grad=False))


def read_generation_config(path: Path) -> dict:
    gen_path = path / "generation_config.json"
    if not gen_path.is_file():
        return {}
    try:
        return json.loads(gen_path.read_text())
    except json.JSONDecodeError as e:
        raise ModelLoadError(f"{gen_path} is not valid JSON: {e}") from e


def _as_ids(value) -> tuple[int, ...]:
    if isinstance(value, int):
        return (value,)
    if isinstance(value, list):
        return tuple(int(v) for v in value)
    return ()
