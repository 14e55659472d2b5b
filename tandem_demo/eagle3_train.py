"""Train an EAGLE-3 head (tandem/spec/eagle3_head.py) for a frozen target:

    python -m tandem_demo.eagle3_train --target models/tandem-demo-target \
        --corpus /tmp/e3/corpus-dense --out models/tandem-demo-eagle3 --minutes 30

The target runs with tandem's own forward (forward_aux over a paged prefill: the same states a
serving runner hands the head) over transcripts of the corpus (`python -m tandem_demo
build-corpus ...`: chat-rendered agent transcripts, plus a share of KJV chapters); the head learns
to predict the target's greedy next tokens (argmax of its logits, not the corpus's tokens),
unrolled `--depth` steps on its own outputs (tandem/spec/eagle3_ttt.py). Tokens inside assistant
replies, which are what gets drafted when serving, weigh `--assistant-weight` in the loss. At the
end it measures, on held-out transcripts, each step's top-1 agreement with the target on assistant
tokens and the mean accepted length of a k-token greedy draft started at each assistant position
(teacher forcing: the earlier draft tokens are the target's own), then writes the head's
directory (config.json with the target's signature and training record, model.safetensors,
train_log.json).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from tandem.config import ModelConfig
from tandem.kv.layout import KVLayout
from tandem.layers.attention_batch import AttentionBatch, SeqSlice
from tandem.models.loader import load_model
from tandem.spec.eagle3_head import Eagle3Head, init_head
from tandem.models.checksums import write_manifest
from tandem.spec.eagle3_loader import WEIGHTS_FILE, config_for_target, save_head
from tandem.spec.eagle3_ttt import step_losses, unroll
from tandem.tokenization.tokenizer import Tokenizer
from tandem_demo.corpus import load_texts

_BLOCK = 16


@dataclass(frozen=True)
class TrainConfig:
    target: str
    corpus: tuple[str, ...]
    out: str
    minutes: float = 30.0
    depth: int = 3                   # unrolled steps (training-time test)
    max_len: int = 1024              # tokens per document (longer ones: a random window)
    docs_per_step: int = 4           # gradient accumulation
    lr: float = 2e-3
    warmup_steps: int = 30
    assistant_weight: float = 4.0
    kjv_share: float = 0.1           # share of documents that are KJV chapters
    other_rows: float = 0.25         # share of rows outside assistant replies in the loss
    aux_layers: tuple[int, ...] | None = None
    eval_docs: int = 60
    seed: int = 0
    threads: int = 1
    init_from: str | None = None     # a head directory to start from (its shape must match)


# --- data ----------------------------------------------------------------------------------
def documents(cfg: TrainConfig, tok: Tokenizer, split: str) -> list[list[int]]:
    rng = random.Random(cfg.seed)
    agent, kjv = [], []
    for d in cfg.corpus:
        agent += load_texts(d, "agent", split)
        kjv += load_texts(d, "kjv", split)
    n_kjv = int(len(agent) * cfg.kjv_share / (1 - cfg.kjv_share))
    texts = agent + rng.sample(kjv, min(n_kjv, len(kjv)))
    rng.shuffle(texts)
    return [e.ids for e in tok.backend.encode_batch(texts, add_special_tokens=False)]


def assistant_mask(ids: list[int], header: list[int], end_id: int) -> torch.Tensor:
    """bool [T]: tokens after each `<|im_start|>assistant\\n` up to and including `<|im_end|>`."""
    mask = torch.zeros(len(ids), dtype=torch.bool)
    inside, h = False, len(header)
    for j, t in enumerate(ids):
        if inside:
            mask[j] = True
            inside = t != end_id
        elif j >= h - 1 and ids[j - h + 1:j + 1] == header:
            inside = True
    return mask


# --- the frozen target ---------------------------------------------------------------------
class FrozenTarget:
    """The target's aux states and greedy tokens for a document, with tandem's forward."""

    def __init__(self, path: str, aux_layers: tuple[int, ...] | None) -> None:
        self.loaded = load_model(ModelConfig(path=path, dtype="float32", show_progress=False))
        self.model = self.loaded.model
        a = self.loaded.arch
        self.layout = KVLayout(model="eagle3-train", dtype="float32", block_size=_BLOCK,
                               num_layers=a.num_layers, num_kv_heads=a.num_kv_heads, head_dim=a.head_dim)
        self.kv = None
        self.embed = self.model.model.embed_tokens.weight.detach()           # [V, H]
        lm = self.model.lm_head.weight
        self.lm_head = (lm if lm is not None else self.embed).detach()        # [V, H]
        self.aux_layers = aux_layers

    @torch.inference_mode()
    def run(self, ids: list[int], layers: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """-> aux [T, k, H], greedy [T] (the target's token after each position)."""
        T = len(ids)
        blocks = -(-T // _BLOCK)
        if self.kv is None or self.kv.shape[0] < blocks:
            self.kv = self.layout.allocate(blocks)
        batch = AttentionBatch.build([SeqSlice(list(range(blocks)), 0, T)], _BLOCK, "cpu")
        hidden, aux = self.model.forward_aux(torch.tensor(ids), torch.arange(T), batch, self.kv, layers)
        return aux, self.model.compute_logits(hidden).argmax(-1)


def _doc_tensors(target: FrozenTarget, head: Eagle3Head, ids: list[int], amask: torch.Tensor,
                 assistant_weight: float, other_rows: float = 1.0, rng: torch.Generator | None = None):
    """A document's tensors; rows outside assistant replies are kept in the loss with probability
    `other_rows` (their logits cost as much as the rest of the head's step)."""
    aux, greedy = target.run(ids, head.cfg.aux_layers)
    aux, greedy = aux.clone(), greedy.clone()   # out of inference mode: autograd may save them
    T = len(ids)
    nxt = torch.tensor(ids[1:] + [0])
    next_emb = F.embedding(nxt, target.embed)                                 # [T, H]
    labels = torch.cat((greedy[1:], greedy[-1:]))                             # row p: target's token at p+2
    tokw = 1.0 + (assistant_weight - 1.0) * amask.float()
    idx = torch.clamp(torch.arange(T) + 2, max=T - 1)
    weights = tokw[idx]
    if other_rows < 1.0:
        weights[(~amask[idx]) & (torch.rand(T, generator=rng) >= other_rows)] = 0.0
    weights[T - 1] = 0.0
    return aux, next_emb, labels, weights, greedy, nxt


# --- evaluation ----------------------------------------------------------------------------
@torch.no_grad()
def evaluate(head: Eagle3Head, target: FrozenTarget, docs, header, end_id, depth: int) -> dict:
    """On assistant tokens: the share of `depth`-token drafts accepted through each step (every
    step up to it agreed with the target's greedy token, the tokens fed being the target's own),
    and the mean accepted length of such a draft."""
    hits = torch.zeros(depth)
    rows = 0
    for ids in docs:
        amask = assistant_mask(ids, header, end_id)
        aux, next_emb, labels, _, greedy, nxt = _doc_tensors(target, head, ids, amask, 1.0)
        outs = unroll(head, aux, next_emb, depth)
        T = len(ids)
        # the token fed at row r (the one at r + 1) is the target's own where the corpus agrees with it
        fed_ok = greedy == nxt
        starts = torch.arange(T - depth - 1)
        chain = torch.ones(len(starts), dtype=torch.bool)
        keep = amask[starts + 2]
        for s, o in enumerate(outs, start=1):
            r = starts + s - 1                     # step s drafts from row p + s - 1
            ok = (F.linear(head.norm(o), target.lm_head).argmax(-1) == labels) & fed_ok
            chain &= ok[r]
            hits[s - 1] += float((chain & keep).sum())
        rows += int(keep.sum())
    accepted = float(hits.sum())
    return {"positions": rows, "accepted_through_step": [round(float(h) / max(rows, 1), 4) for h in hits],
            "mean_accepted_of_%d" % depth: round(accepted / max(rows, 1), 3)}


# --- training ------------------------------------------------------------------------------
def train(cfg: TrainConfig) -> dict:
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.threads)
    started = time.monotonic()
    target = FrozenTarget(cfg.target, cfg.aux_layers)
    tok = Tokenizer.from_dir(cfg.target)
    header = tok.backend.encode("<|im_start|>assistant\n", add_special_tokens=False).ids
    end_id = tok.backend.token_to_id("<|im_end|>")
    train_docs = documents(cfg, tok, "train")
    held = [d[:cfg.max_len] for d in documents(replace(cfg, kjv_share=0.0), tok, "heldout")[:cfg.eval_docs]]
    sha = _git_blob_sha(Path(cfg.target) / "model.safetensors")
    hcfg = config_for_target(target.model, cfg.aux_layers, sha)
    head = init_head(Eagle3Head(hcfg), cfg.seed)
    if cfg.init_from:   # e.g. a head trained for an earlier version of the target
        state = load_file(str(Path(cfg.init_from) / WEIGHTS_FILE))
        head.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
    for p in head.parameters():
        p.requires_grad_(True)
    decay = [p for p in head.parameters() if p.dim() >= 2]
    rest = [p for p in head.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}],
                            lr=cfg.lr, betas=(0.9, 0.95))
    budget = cfg.minutes * 60
    rng = random.Random(cfg.seed + 1)
    gen = torch.Generator().manual_seed(cfg.seed + 2)
    log, step, tokens, doc_i = [], 0, 0, 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < budget:
        progress = (time.monotonic() - t0) / budget
        lr = cfg.lr * min(1.0, (step + 1) / cfg.warmup_steps) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        ces = accs = None
        for _ in range(cfg.docs_per_step):
            ids = train_docs[doc_i % len(train_docs)]
            doc_i += 1
            if len(ids) > cfg.max_len:
                at = rng.randrange(len(ids) - cfg.max_len + 1)
                ids = ids[at:at + cfg.max_len]
            if len(ids) < cfg.depth + 3:
                continue
            amask = assistant_mask(ids, header, end_id)
            aux, next_emb, labels, weights, _, _ = _doc_tensors(target, head, ids, amask, cfg.assistant_weight,
                                                                cfg.other_rows, gen)
            outs = unroll(head, aux, next_emb, cfg.depth)
            loss, ces, accs = step_losses(head, outs, target.lm_head, labels, weights)
            (loss / cfg.docs_per_step).backward()
            tokens += len(ids)
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 10 == 0 and ces is not None:
            entry = {"step": step, "tokens": tokens, "seconds": round(time.monotonic() - t0, 1), "lr": lr,
                     "ce": [round(c, 4) for c in ces], "acc": [round(a, 4) for a in accs]}
            log.append(entry)
            print(json.dumps(entry), flush=True)
    train_seconds = time.monotonic() - t0
    head.eval()
    ev = evaluate(head, target, held, header, end_id, cfg.depth)
    print(json.dumps({"heldout": ev}), flush=True)
    record = {"command": "python -m tandem_demo.eagle3_train " + " ".join(_args_of(cfg)),
              "train_minutes": round(train_seconds / 60, 1), "steps": step, "tokens": tokens,
              "documents_seen": doc_i, "train_documents": len(train_docs), "heldout": ev,
              "target_model_safetensors_git_sha": sha, "config": {**asdict(cfg), "corpus": list(cfg.corpus)},
              "versions": {"torch": torch.__version__}}
    head.cfg = replace(head.cfg, training=record)
    save_head(head, cfg.out)
    write_manifest(cfg.out)   # tandem refuses a head whose files differ from it
    (Path(cfg.out) / "train_log.json").write_text(json.dumps(log) + "\n")
    print(f"wrote {cfg.out} in {(time.monotonic() - started) / 60:.1f} minutes", flush=True)
    return record


def _git_blob_sha(path: Path) -> str:
    try:
        return subprocess.run(["git", "hash-object", str(path)], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def _args_of(cfg: TrainConfig) -> list[str]:
    out = ["--target", cfg.target]
    for c in cfg.corpus:
        out += ["--corpus", c]
    out += ["--out", cfg.out, "--minutes", f"{cfg.minutes:g}", "--depth", str(cfg.depth),
            "--lr", f"{cfg.lr:g}", "--max-len", str(cfg.max_len), "--threads", str(cfg.threads)]
    if cfg.init_from:
        out += ["--init-from", cfg.init_from]
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = TrainConfig(target="", corpus=(), out="")
    p.add_argument("--target", required=True, help="the target model's directory")
    p.add_argument("--corpus", action="append", required=True, help="a build-corpus directory (repeatable)")
    p.add_argument("--out", required=True, help="the head's directory")
    p.add_argument("--minutes", type=float, default=d.minutes, help="training time (evaluation comes after)")
    p.add_argument("--depth", type=int, default=d.depth)
    p.add_argument("--max-len", type=int, default=d.max_len)
    p.add_argument("--docs-per-step", type=int, default=d.docs_per_step)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--assistant-weight", type=float, default=d.assistant_weight)
    p.add_argument("--kjv-share", type=float, default=d.kjv_share)
    p.add_argument("--other-rows", type=float, default=d.other_rows)
    p.add_argument("--aux-layers", default=None, help="comma-separated target layers (default: low, middle, high)")
    p.add_argument("--eval-docs", type=int, default=d.eval_docs)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--threads", type=int, default=d.threads)
    p.add_argument("--init-from", default=None, help="start from this head's weights (same shape)")
    a = p.parse_args(argv)
    layers = tuple(int(x) for x in a.aux_layers.split(",")) if a.aux_layers else None
    train(TrainConfig(target=a.target, corpus=tuple(a.corpus), out=a.out, minutes=a.minutes, depth=a.depth,
                      max_len=a.max_len, docs_per_step=a.docs_per_step, lr=a.lr,
                      assistant_weight=a.assistant_weight, kjv_share=a.kjv_share, other_rows=a.other_rows, aux_layers=layers,
                      eval_docs=a.eval_docs, seed=a.seed, threads=a.threads, init_from=a.init_from))


if __name__ == "__main__":
    main()
