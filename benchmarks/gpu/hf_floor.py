"""The floor: Hugging Face transformers' `generate` on the same config with random weights, one
sequence, greedy. Its decode step = (time of N new tokens - time of 1) / (N - 1)."""

from __future__ import annotations

import torch
from transformers import CONFIG_MAPPING, AutoModelForCausalLM

from benchmarks.gpu.timing import median_seconds


def hf_decode_seconds(cfg: dict, dtype: torch.dtype, device: torch.device, context: int, new_tokens: int,
                      reps: int) -> float:
    hf_cfg = CONFIG_MAPPING[cfg["model_type"]](**{k: v for k, v in cfg.items() if k != "model_type"})
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(hf_cfg, dtype=dtype).eval()
    ids = torch.randint(hf_cfg.vocab_size, (1, context), device=device)

    def generate(n: int):
        with torch.inference_mode():
            return model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)

    first = median_seconds(lambda: generate(1), device, reps)
    many = median_seconds(lambda: generate(new_tokens), device, reps)
    del model
    return max(many - first, 0.0) / (new_tokens - 1)
