"""Train a demo model (transformers' LlamaForCausalLM on the CPU) and save it in HF format.

    python -m tandem_demo.train --out models/tandem-demo-target --size target --minutes 33 [--resume]

Packed 1024-token rows, AdamW, linear warmup then cosine decay to min_lr_ratio * lr. The schedule's
progress is step/steps with --steps, else elapsed wall time / budget with --minutes (the budget counts
evaluation and checkpoint time too, and accumulates across resumes). A checkpoint (weights, optimizer,
data position, history) is written to the work directory every few minutes; --resume continues from it.
The final model is saved in bfloat16 safetensors with the tokenizer files, a loss curve and train_log.json.
--extra-corpus adds another corpus's training transcripts.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer
from tqdm import tqdm

from tandem.models.checksums import write_manifest
from tandem_demo.corpus import PARTS, load_texts
from tandem_demo.loss_curve import plot_loss_curve
from tandem_demo.model_card import write_card
from tandem_demo.packing import (aligned_rows, concat_docs, epoch_rows, fixed_rows, load_docs, save_docs,
                                  tokenize_docs)
from tandem_demo.sizes import SIZES, llama_config
from tandem_demo.tokenizer_train import PAD_TOKEN, TOKENIZER_FILES, generation_config

DEFAULT_ROOT = "/tmp/tandem-demo"


PACKINGS = ("stream", "aligned")


@dataclass(frozen=True)
class TrainConfig:
    out_dir: str                       # final HF model directory
    size: str = "target"               # a key of tandem_demo.sizes.SIZES
    corpus_dir: str = f"{DEFAULT_ROOT}/corpus"
    tokenizer_dir: str = f"{DEFAULT_ROOT}/tokenizer"
    work_dir: str | None = None        # checkpoint; default {DEFAULT_ROOT}/work-{size}
    token_cache: str = f"{DEFAULT_ROOT}/tokens"  # tokenized corpus, shared by both sizes
    minutes: float | None = 30.0       # wall-time budget (ignored when steps is set)
    steps: int | None = None           # fixed number of optimizer steps
    seq_len: int = 1024
    # "stream": rows cut from the concatenated documents; "aligned": documents whole in rows,
    # padded (tandem_demo/packing.py: generated tool names need their tool list in the row)
    packing: str = "stream"
    batch_size: int = 4                # rows per step
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    # share of the budget, at its end, over which the lr decays (cosine to min_lr_ratio); before
    # it the lr holds at its peak. 1.0: plain cosine over the whole run; below 1: warmup-stable-decay
    decay_fraction: float = 1.0
    warmup_steps: int = 30
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 0
    bf16_autocast: bool = True         # measured ~1.6x faster than float32 on this AMX CPU
    # weight of tokens inside assistant replies (tool calls, answers) in the training loss; the rest
    # (system prompt, tool schemas, user turns, KJV) weighs 1. The logged loss is always the plain mean.
    assistant_loss_weight: float = 1.0
    # weight of the tokens of a tool call (`<tool_call>` to `</tool_call>`), above the assistant weight
    tool_call_loss_weight: float | None = None
    extra_corpus_dirs: tuple[str, ...] = ()   # their agent.train transcripts join the training data
    threads: int = 1
    eval_every: int = 50               # steps between held-out evaluations
    eval_rows: int = 4                 # rows per corpus part in those evaluations
    ckpt_every_minutes: float = 3.0
    resume: bool = False
    # start from this HF model directory's weights (fine-tuning; fresh optimizer and schedule); a
    # --resume checkpoint, when there is one, wins over it
    init_from: str | None = None
    progress: bool = True
    device: str = "cpu"                # "cuda" for the GPU run (scripts/train-demo-v3.sh)
    max_shard_mib: float = 16.0           # the saved weights are split into files of at most this size

    def __post_init__(self) -> None:
        if self.packing not in PACKINGS:
            raise ValueError(f"packing {self.packing!r}: choose one of {', '.join(PACKINGS)}")

    @property
    def work(self) -> Path:
        return Path(self.work_dir or f"{DEFAULT_ROOT}/work-{self.size}")


@dataclass
class TrainState:
    step: int = 0
    tokens: int = 0
    elapsed: float = 0.0               # seconds of training wall time, across resumes
    epoch: int = 0
    row: int = 0                       # next row of this epoch
    history: dict = dataclasses.field(default_factory=lambda: {"train": [], "eval": []})
    segments: list = dataclasses.field(default_factory=list)   # [first step, command line] per start/resume


def lr_at(cfg: TrainConfig, step: int, progress: float) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    into_decay = (min(1.0, progress) - (1 - cfg.decay_fraction)) / cfg.decay_fraction
    cos = 0.5 * (1 + math.cos(math.pi * max(0.0, into_decay)))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cos)


def progress_of(cfg: TrainConfig, state: TrainState) -> float:
    if cfg.steps is not None:
        return state.step / cfg.steps
    return state.elapsed / (cfg.minutes * 60)


def _docs(cfg: TrainConfig, tok: Tokenizer, part: str, split: str, corpus_dir: str | None = None):
    """Tokenized documents of one corpus part, cached (an extra corpus in a subfolder named after it)."""
    corpus_dir = corpus_dir or cfg.corpus_dir
    cache = Path(cfg.token_cache)
    if corpus_dir != cfg.corpus_dir:
        cache = cache / Path(corpus_dir).name
    cache = cache / f"tokens.{part}.{split}.npz"
    if cache.exists():
        return load_docs(cache)
    docs = tokenize_docs(tok, load_texts(corpus_dir, part, split), tok.token_to_id(PAD_TOKEN))
    cache.parent.mkdir(parents=True, exist_ok=True)
    save_docs(docs, cache)
    return docs


def build_model(cfg: TrainConfig, tok: Tokenizer):
    # lazy: transformers is an extra (demo, test), not a dependency, and takes ~0.6 s to import
    from transformers import LlamaForCausalLM

    if cfg.init_from:
        model = LlamaForCausalLM.from_pretrained(cfg.init_from, dtype=torch.float32)
        if model.config.vocab_size != tok.get_vocab_size():
            raise ValueError(f"--init-from {cfg.init_from} has vocabulary {model.config.vocab_size}, "
                             f"the tokenizer {tok.get_vocab_size()}: use that model's tokenizer")
        return model
    gen = generation_config(tok)
    mcfg = llama_config(SIZES[cfg.size], eos_ids=gen["eos_token_id"], pad_id=gen["pad_token_id"])
    torch.manual_seed(cfg.seed)
    return LlamaForCausalLM(mcfg)


def loss_weights(cfg: TrainConfig, rows: np.ndarray, tok: Tokenizer) -> torch.Tensor:
    """float [B, T]: 1 everywhere, the assistant weight inside replies, the tool-call weight inside calls."""
    weights = torch.ones(rows.shape)
    if cfg.assistant_loss_weight != 1.0:
        header, end_id = tok.encode("<|im_start|>assistant\n").ids, tok.token_to_id("<|im_end|>")
        weights[torch.from_numpy(span_mask(rows, header, end_id))] = cfg.assistant_loss_weight
    if cfg.tool_call_loss_weight is not None:
        calls = span_mask(rows, [tok.token_to_id("<tool_call>")], tok.token_to_id("</tool_call>"))
        weights[torch.from_numpy(calls)] = cfg.tool_call_loss_weight
    return weights


def span_mask(rows: np.ndarray, header: list[int], end_id: int) -> np.ndarray:
    """bool [B, T]: tokens after each `header` sequence (e.g. `<|im_start|>assistant\\n`) up to and including
    the next `end_id`. A row that starts inside a span counts those first tokens out (they lack the header).
    Vectorized (a 16k-token row costs no Python loop): a token is inside when the last header that ended
    before it came after the last `end_id` before it."""
    rows = np.asarray(rows)
    b, t = rows.shape
    h = len(header)
    ended = np.zeros((b, t), dtype=bool)          # a header's last token
    if t >= h:
        match = np.ones((b, t - h + 1), dtype=bool)
        for k, tok in enumerate(header):
            match &= rows[:, k: t - h + 1 + k] == tok
        ended[:, h - 1:] = match
    idx = np.arange(t)
    last_start = np.maximum.accumulate(np.where(ended, idx, -1), axis=1)
    last_end = np.maximum.accumulate(np.where(rows == end_id, idx, -1), axis=1)
    before = np.full((b, 1), -1)
    # strictly before each position: the end token itself is still inside its span
    return np.concatenate([before, last_start[:, :-1]], 1) > np.concatenate([before, last_end[:, :-1]], 1)


def weighted_loss(logits: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, float]:
    """logits [B, T, V], ids [B, T], weights [B, T] (0: no loss, e.g. padding) -> (weighted mean CE
    for backward, plain mean CE over the positions with a loss)."""
    ce = torch.nn.functional.cross_entropy(logits[:, :-1].float().flatten(0, 1), ids[:, 1:].flatten(),
                                           reduction="none")                      # [B * (T-1)]
    w = weights[:, 1:].flatten()
    counted = w > 0
    return (ce * w).sum() / w.sum(), float(ce.detach()[counted].mean())


def make_optimizer(cfg: TrainConfig, model) -> torch.optim.Optimizer:
    # decay matrices (and the tied embedding); never norms
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": rest, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8)


@torch.no_grad()
def heldout_loss(model, rows: torch.Tensor, bf16: bool) -> float:
    """Mean next-token cross-entropy over rows [N, T], one row at a time (on the model's device)."""
    model.eval()
    total = 0.0
    device = next(model.parameters()).device
    for r in rows:
        r = r.to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            total += float(model(input_ids=r[None], labels=r[None]).loss)
    model.train()
    return total / len(rows)


def save_checkpoint(path: Path, model, opt, state: TrainState, cfg: TrainConfig) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optim": opt.state_dict(), "state": dataclasses.asdict(state),
                "config": dataclasses.asdict(cfg)}, tmp)
    os.replace(tmp, path)   # a crash mid-write never leaves a truncated checkpoint


def _command_line() -> str:
    module = "tandem_demo.train" if sys.argv[0].endswith("train.py") else "tandem_demo"
    return f"python -m {module} {shlex.join(sys.argv[1:])}"


def write_corpus_manifest(corpus_dir: str, extra_corpus_dirs: tuple[str, ...], out: Path) -> None:
    """corpus_manifest.json: the main corpus's manifest, with those of the extra corpora whose training
    transcripts were used too (the held-out splits are always the main corpus's)."""
    manifest = json.loads((Path(corpus_dir) / "manifest.json").read_text())
    if extra_corpus_dirs:
        manifest["extra_corpora"] = [json.loads((Path(d) / "manifest.json").read_text()) for d in extra_corpus_dirs]
    (out / "corpus_manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def finalize(cfg: TrainConfig, model, state: TrainState, heldout: dict, rows_per_epoch: int) -> dict:
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    final_eval = {p: heldout_loss(model, rows, cfg.bf16_autocast) for p, rows in heldout.items()}
    state.history["eval"].append([state.step, state.tokens, final_eval])
    model.to("cpu", torch.bfloat16)
    model.config.dtype = torch.bfloat16
    model.save_pretrained(out, safe_serialization=True, max_shard_size=int(cfg.max_shard_mib * 2**20))
    for name in TOKENIZER_FILES:    # our generation_config.json (eos = <|im_end|>, <|endoftext|>) wins
        shutil.copy(Path(cfg.tokenizer_dir) / name, out / name)
    write_corpus_manifest(cfg.corpus_dir, cfg.extra_corpus_dirs, out)
    plot_loss_curve(state.history, out / "loss_curve.png",
                    f"tandem-demo {cfg.size}: {state.tokens / 1e6:.2f}M tokens, {state.elapsed / 60:.1f} min")
    recent = [x for _, _, x in state.history["train"][-50:]]
    # lazy: transformers is an extra (demo, test), not a dependency, and takes ~0.6 s to import
    import transformers

    log = {
        "command": _command_line(),
        "segments": state.segments,
        "config": dataclasses.asdict(cfg),
        "parameters": sum(p.numel() for p in model.parameters()),
        "steps": state.step, "tokens": state.tokens, "epochs": round(state.epoch + state.row / max(1, rows_per_epoch), 3),
        "train_minutes": round(state.elapsed / 60, 2),
        "tokens_per_second": round(state.tokens / max(state.elapsed, 1e-9), 1),
        "final_train_loss_last50": round(float(np.mean(recent)), 4) if recent else None,
        "heldout_loss": {p: round(x, 4) for p, x in final_eval.items()},
        "heldout_perplexity": {p: round(math.exp(x), 3) for p, x in final_eval.items()},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": platform.python_version()},
        "cpu": platform.processor() or platform.machine(),
        "history": state.history,
    }
    init_log = Path(cfg.init_from or "") / "train_log.json"
    if cfg.init_from and init_log.exists():   # the run that made the starting weights, for the card
        prev = json.loads(init_log.read_text())
        log["init"] = {"from": cfg.init_from, "segments": prev.get("segments", []),
                       "train_minutes": prev.get("train_minutes"), "tokens": prev.get("tokens"),
                       "total_minutes_with_init": round(prev.get("train_minutes", 0) + state.elapsed / 60, 2)}
    (out / "train_log.json").write_text(json.dumps(log, indent=1) + "\n")
    write_card(out, cfg.size)
    write_manifest(out)   # last: the files as shipped (tandem refuses a checkpoint that differs)
    return log


def _rows(cfg: TrainConfig, docs, epoch: int, tok: Tokenizer) -> tuple[np.ndarray, np.ndarray | None]:
    """This epoch's rows and, for aligned packing, where they are padding."""
    if cfg.packing == "aligned":
        return aligned_rows(docs, cfg.seq_len, cfg.seed, epoch, tok.token_to_id(PAD_TOKEN))
    return epoch_rows(docs, cfg.seq_len, cfg.seed, epoch), None


def train(cfg: TrainConfig) -> dict:
    torch.set_num_threads(cfg.threads)
    tok = Tokenizer.from_file(str(Path(cfg.tokenizer_dir) / "tokenizer.json"))
    train_docs = concat_docs([_docs(cfg, tok, p, "train") for p in PARTS]
                             + [_docs(cfg, tok, "agent", "train", d) for d in cfg.extra_corpus_dirs])
    heldout = {p: torch.from_numpy(fixed_rows(_docs(cfg, tok, p, "heldout"), cfg.seq_len, cfg.eval_rows))
               for p in PARTS}
    # a held-out split shorter than one row (a small corpus at a long seq_len) is not evaluated
    heldout = {p: rows for p, rows in heldout.items() if len(rows)}
    device = torch.device(cfg.device)
    model = build_model(cfg, tok).to(device)
    opt = make_optimizer(cfg, model)
    state = TrainState()
    ckpt = cfg.work / "checkpoint.pt"
    if cfg.resume and ckpt.exists():
        saved = torch.load(ckpt, map_location=device, weights_only=False)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optim"])
        known = {f.name for f in dataclasses.fields(TrainState)}   # a field no longer kept is dropped
        state = TrainState(**{k: v for k, v in saved["state"].items() if k in known})
        print(f"resumed from {ckpt} at step {state.step} ({state.elapsed / 60:.1f} min)", file=sys.stderr)
    state.segments.append([state.step + 1, _command_line()])
    cfg.work.mkdir(parents=True, exist_ok=True)
    model.train()
    rows, pad = _rows(cfg, train_docs, state.epoch, tok)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{cfg.size}: {n_params / 1e6:.2f}M parameters, {len(train_docs.tokens) / 1e6:.2f}M training tokens, "
          f"{len(rows)} rows of {cfg.seq_len} per epoch", file=sys.stderr)

    total = cfg.steps if cfg.steps is not None else int(cfg.minutes * 60)
    bar = tqdm(total=total, initial=min(total, state.step if cfg.steps is not None else int(state.elapsed)),
               unit="step" if cfg.steps is not None else "s", disable=not cfg.progress, mininterval=20,
               file=sys.stderr)
    seg_start, last_ckpt = time.monotonic(), time.monotonic()
    base_elapsed = state.elapsed
    while progress_of(cfg, state) < 1.0:
        if state.row + cfg.batch_size > len(rows):
            state.epoch, state.row = state.epoch + 1, 0
            rows, pad = _rows(cfg, train_docs, state.epoch, tok)
        batch = torch.from_numpy(rows[state.row: state.row + cfg.batch_size]).to(device)   # [B, T]
        batch_pad = None if pad is None else torch.from_numpy(pad[state.row: state.row + cfg.batch_size])
        lr = lr_at(cfg, state.step, progress_of(cfg, state))
        for g in opt.param_groups:
            g["lr"] = lr
        weights = loss_weights(cfg, rows[state.row: state.row + cfg.batch_size], tok)
        if batch_pad is not None:
            weights[batch_pad] = 0.0
        weights = weights.to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.bf16_autocast):
            logits = model(input_ids=batch).logits                                   # [B, T, V]
        loss_t, loss = weighted_loss(logits, batch, weights)
        loss_t.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        state.step += 1
        state.row += cfg.batch_size
        state.tokens += batch.numel() - (0 if batch_pad is None else int(batch_pad.sum()))
        state.history["train"].append([state.step, state.tokens, round(loss, 4)])
        if state.step % cfg.eval_every == 0:
            ev = {p: round(heldout_loss(model, r, cfg.bf16_autocast), 4) for p, r in heldout.items()}
            state.history["eval"].append([state.step, state.tokens, ev])
            bar.write(f"step {state.step} tokens {state.tokens} lr {lr:.2e} loss {loss:.3f} "
                      f"heldout {ev}")
        now = time.monotonic()
        prev = state.elapsed
        state.elapsed = base_elapsed + (now - seg_start)
        bar.update(1 if cfg.steps is not None else int(state.elapsed) - int(prev))
        bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.1e}",
                        tok_s=f"{state.tokens / max(state.elapsed, 1e-9):.0f}", refresh=False)
        if now - last_ckpt > cfg.ckpt_every_minutes * 60:
            save_checkpoint(ckpt, model, opt, state, cfg)
            last_ckpt = time.monotonic()
    bar.close()
    save_checkpoint(ckpt, model, opt, state, cfg)
    log = finalize(cfg, model, state, heldout, len(rows))
    print(json.dumps({k: log[k] for k in ("parameters", "steps", "tokens", "train_minutes", "tokens_per_second",
                                          "final_train_loss_last50", "heldout_perplexity")}), file=sys.stderr)
    return log


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def add_train_args(p: argparse.ArgumentParser) -> None:
    d = TrainConfig(out_dir="")
    p.add_argument("--out", required=True, help="final model directory")
    p.add_argument("--size", default=d.size, choices=sorted(SIZES))
    p.add_argument("--corpus", default=d.corpus_dir)
    p.add_argument("--tokenizer", default=d.tokenizer_dir)
    p.add_argument("--work", default=None, help=f"checkpoint directory (default {DEFAULT_ROOT}/work-SIZE)")
    p.add_argument("--token-cache", default=d.token_cache)
    p.add_argument("--minutes", type=float, default=d.minutes)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--seq-len", type=int, default=d.seq_len)
    p.add_argument("--packing", default=d.packing, choices=PACKINGS,
                   help="aligned: documents whole in rows, padded (see tandem_demo/packing.py)")
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--decay-fraction", type=_fraction, default=d.decay_fraction,
                   help="share of the budget, at its end, over which the lr decays; before it the lr "
                        "holds at its peak (1: cosine over the whole run)")
    p.add_argument("--assistant-loss-weight", type=float, default=d.assistant_loss_weight)
    p.add_argument("--tool-call-loss-weight", type=float, default=None)
    p.add_argument("--extra-corpus", action="append", default=[], help="another corpus directory (repeatable)")
    p.add_argument("--threads", type=int, default=d.threads)
    p.add_argument("--eval-every", type=int, default=d.eval_every)
    p.add_argument("--float32", action="store_true", help="disable bfloat16 autocast")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--init-from", default=None,
                   help="HF model directory whose weights start the run (fine-tuning; use its tokenizer)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--device", default=d.device, help="cpu, or cuda for the GPU run")
    p.add_argument("--max-shard-mib", type=float, default=d.max_shard_mib,
                   help="split the saved weights into safetensors files of at most this many MiB")


def config_from_args(a: argparse.Namespace) -> TrainConfig:
    return TrainConfig(out_dir=a.out, size=a.size, corpus_dir=a.corpus, tokenizer_dir=a.tokenizer,
                       work_dir=a.work, token_cache=a.token_cache, minutes=a.minutes, steps=a.steps, batch_size=a.batch_size, seq_len=a.seq_len, packing=a.packing, lr=a.lr,
                       decay_fraction=a.decay_fraction,
                       threads=a.threads, assistant_loss_weight=a.assistant_loss_weight,
                       tool_call_loss_weight=a.tool_call_loss_weight, extra_corpus_dirs=tuple(a.extra_corpus),
                       eval_every=a.eval_every,
                       bf16_autocast=not a.float32, seed=a.seed,
                       resume=a.resume, init_from=a.init_from, progress=not a.no_progress,
                       device=a.device, max_shard_mib=a.max_shard_mib)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_train_args(p)
    train(config_from_args(p.parse_args(argv)))


if __name__ == "__main__":
    main()
