"""`python -m tandem_demo v3`: the demo models v3 (issue 33) in one run on one GPU.

Steps, each a pure function of the config (the data is generated on the host from `seed`):
1. three corpora, in parallel processes: `dense` (the catalog tools and the KJV), `pool` (tools
   generated per transcript: names, argument names and values never fixed; every value stated in
   the user's words; tool results quoted in the next answer; transcripts with and without tools)
   `pool-drill` (one exchange over 1-3 generated tools, mostly a call) and `pool-wide` (6-12 tools
   offered, as agent harnesses do);
2. the target (`sizes.SIZES["target-v3"]`, 16k context) on rows of `seq_len` tokens packed from
   whole transcripts (`--packing aligned`), so long contexts hold many tool lists and answers;
3. the draft model on the same data, on the GPU, then
4. the held-out evaluation (`unseen_eval.unseen_tools`, transcripts from EVAL_SEED, a seed no
   training corpus uses), written to eval_v3.json and the target's card; while 3 and 4 run on the
   GPU, the EAGLE-3 head trains against the new target on the host's CPU cores (a subprocess:
   tandem_demo/eagle3_train.py has no GPU path yet);
5. checksums.sha256 in every model directory, last.
Weights are saved in bfloat16 in shards of at most `max_shard_mib`. `scripts/train-demo-v3.sh`
runs it on a GPU machine; the test suite runs it at tiny scale on the CPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tandem.models.checksums import write_manifest
from tandem_demo import train as target_train
from tandem_demo.corpus import CorpusConfig, build_corpus
from tandem_demo.kjv import read_bible_text
from tandem_demo.tokenizer_train import TOKENIZER_FILES
from tandem_demo.unseen_eval import EVAL_SEED

LAYOUTS = ("dense", "pool", "pool-drill", "pool-wide")


@dataclass(frozen=True)
class V3Config:
    out_root: str = "/tmp/tandem-demo-v3/models"   # writes tandem-demo-{target,draft,eagle3} there (new dirs)
    work: str = "/tmp/tandem-demo-v3"           # corpora, token caches, checkpoints
    device: str = "cuda"
    seed: int = 3301                            # of the corpora (layout i uses seed + i); never EVAL_SEED
    tokenizer_dir: str = "models/tandem-demo-target"   # v2's 4096-token vocabulary, kept
    bible_text: str | None = None               # a file holding `bible Gen1:1-Rev22:21`'s output; None: run it
    transcripts: tuple[int, ...] = (20000, 40000, 40000, 15000)   # per layout of LAYOUTS, training split
    heldout: int = 300
    target_size: str = "target-v3"
    draft_size: str = "draft-v3"
    seq_len: int = 16384
    batch_size: int = 8
    lr: float = 1.5e-3                          # v2's finding: higher peaks never learned to copy
    target_minutes: float = 4.0
    draft_minutes: float = 1.5
    head_minutes: float = 2.5                   # runs beside the draft and the evaluation
    steps: int | None = None                    # fixed steps for target and draft instead of minutes (tests)
    head_threads: int = 8
    head_max_len: int = 2048
    eval_transcripts: int = 30
    max_shard_mib: float = 16.0
    threads: int = 1                            # torch threads of this process (the GPU run needs few)

    def __post_init__(self) -> None:
        if len(self.transcripts) != len(LAYOUTS):
            raise ValueError(f"transcripts: one count per layout of {LAYOUTS}, got {self.transcripts}")
        if EVAL_SEED in range(self.seed, self.seed + len(LAYOUTS)):
            raise ValueError(f"seed {self.seed}: the held-out evaluation's seed {EVAL_SEED} must stay unseen")

    def corpus(self, layout: str) -> Path:
        return Path(self.work) / f"corpus-{layout}"

    def model(self, role: str) -> Path:
        return Path(self.out_root) / f"tandem-demo-{role}"

    @property
    def tokenizer(self) -> Path:
        """The tokenizer files copied into the work directory (the out directory may be their source)."""
        return Path(self.work) / "tokenizer"


def preflight(cfg: V3Config) -> None:
    """Fail in seconds, not after minutes of training: every package a step needs, and the device."""
    import importlib

    import torch

    missing = []
    for name in ("transformers", "tokenizers", "safetensors", "matplotlib", "numpy", "tqdm", "jinja2"):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise RuntimeError(f"python -m tandem_demo v3 needs {', '.join(missing)} (pip install -e '.[demo]')")
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"--device {cfg.device}: torch {torch.__version__} sees no CUDA device")


def prepare(cfg: V3Config) -> None:
    """Refuse to write over model directories that hold files (e.g. the committed v2 models: write
    elsewhere, compare, then copy); copy the tokenizer files aside."""
    for role in ("target", "draft", "eagle3"):
        d = cfg.model(role)
        if d.is_dir() and any(d.iterdir()):
            raise ValueError(f"{d} is not empty: give --out-root a new directory (then copy the models over)")
    cfg.tokenizer.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copy(Path(cfg.tokenizer_dir) / name, cfg.tokenizer / name)


def _build(out: str, corpus: CorpusConfig, text_path: str) -> dict:
    return build_corpus(out, corpus, bible_text=Path(text_path).read_text())


def build_corpora(cfg: V3Config) -> None:
    text_path = Path(cfg.work) / "kjv.txt"
    text_path.parent.mkdir(parents=True, exist_ok=True)
    text_path.write_text(Path(cfg.bible_text).read_text() if cfg.bible_text else read_bible_text())
    with ProcessPoolExecutor(len(LAYOUTS)) as pool:
        jobs = [pool.submit(_build, str(cfg.corpus(layout)),
                            CorpusConfig(seed=cfg.seed + i, agent_train=n, agent_heldout=cfg.heldout, layout=layout),
                            str(text_path))
                for i, (layout, n) in enumerate(zip(LAYOUTS, cfg.transcripts))]
        for job in jobs:
            job.result()


def lm_config(cfg: V3Config, role: str) -> target_train.TrainConfig:
    size = cfg.target_size if role == "target" else cfg.draft_size
    return target_train.TrainConfig(
        out_dir=str(cfg.model(role)), size=size, corpus_dir=str(cfg.corpus("dense")),
        extra_corpus_dirs=tuple(str(cfg.corpus(layout)) for layout in LAYOUTS[1:]),
        tokenizer_dir=str(cfg.tokenizer), work_dir=str(Path(cfg.work) / f"work-{role}"),
        token_cache=str(Path(cfg.work) / "tokens"),
        minutes=cfg.target_minutes if role == "target" else cfg.draft_minutes, steps=cfg.steps,
        seq_len=cfg.seq_len, packing="aligned", batch_size=cfg.batch_size,
        lr=cfg.lr if role == "target" else 4e-3, decay_fraction=0.5, warmup_steps=min(30, cfg.steps or 30),
        assistant_loss_weight=4.0, tool_call_loss_weight=8.0, eval_every=max(10, (cfg.steps or 100) // 2),
        eval_rows=2, seed=cfg.seed, threads=cfg.threads, progress=False, device=cfg.device,
        max_shard_mib=cfg.max_shard_mib)


def head_command(cfg: V3Config) -> list[str]:
    return [sys.executable, "-m", "tandem_demo.eagle3_train", "--target", str(cfg.model("target")),
            "--corpus", str(cfg.corpus("dense")), "--corpus", str(cfg.corpus("pool")),
            "--out", str(cfg.model("eagle3")), "--minutes", f"{cfg.head_minutes:g}",
            "--max-len", str(cfg.head_max_len), "--threads", str(cfg.head_threads),
            "--eval-docs", "20" if cfg.steps is None else "2"]


def evaluate_target(cfg: V3Config) -> dict:
    """The held-out figures of issue 33 item 3 (grammar off, guard off: the model alone)."""
    import torch
    import transformers
    from tandem_demo.corpus import read_jsonl
    from tandem_demo.unseen_eval import unseen_tools, verses_from_rows

    path = str(cfg.model("target"))
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).to(cfg.device).eval()
    verses = verses_from_rows(read_jsonl(cfg.corpus("dense") / "kjv.heldout.jsonl"))
    started = time.monotonic()
    results = unseen_tools(_OnDevice(model, cfg.device), tok, verses, cfg.eval_transcripts)
    results["minutes"] = round((time.monotonic() - started) / 60, 2)
    results["command"] = "python -m tandem_demo v3 " + " ".join(_args_of(cfg))
    return results


class _OnDevice:
    """The HF model with generate()'s inputs moved to its device (unseen_eval builds them on the CPU)."""

    def __init__(self, model, device: str) -> None:
        self.model, self.device = model, device

    def generate(self, **kw):
        return self.model.generate(**{k: v.to(self.device) if hasattr(v, "to") else v for k, v in kw.items()}).cpu()


def card_section(results: dict) -> str:
    pct = lambda x: f"{100 * x:.1f}%"   # noqa: E731
    g = results.get("generated", {})
    rows = [("valid calls (offered name, arguments validate), grammar off", results["valid_share"], ">= 95%"),
            ("required arguments equal to the request's values", results["required_args_equal_share"], ">= 70%"),
            ("no tool call in turns without tools (guard off)",
             results["no_tools_offered"].get("no_call_share", 0.0), ">= 98%"),
            ("after a tool result, the answer quotes its values", results["quotes_result_share"], ">= 70%"),
            ("prose replies in English words", results["english_share"], "stays English")]
    lines = ["", "## Held-out evaluation (v3)", "",
             f"{results['call_turns']} call turns ({g.get('call_turns', 0)} over generated tools from seed "
             f"{results['seed']}, never used in training, and hand-written ones), greedy, no grammar, no guard:", "",
             "| figure | value | goal |", "|---|---|---|"]
    lines += [f"| {name} | {pct(v)} | {goal} |" for name, v, goal in rows]
    lines += ["", f"Command: `{results['command']}` (evaluation {results['minutes']} minutes).", ""]
    return "\n".join(lines)


def run(cfg: V3Config) -> dict:
    """Every step; returns {"minutes": {...}, "eval": {...}}."""
    import torch

    torch.set_num_threads(cfg.threads)
    t0 = time.monotonic()
    minutes: dict[str, float] = {}

    def lap(name: str, since: float) -> float:
        minutes[name] = round((time.monotonic() - since) / 60, 2)
        print(json.dumps({"step": name, "minutes": minutes[name]}), flush=True)
        return time.monotonic()

    t = time.monotonic()
    preflight(cfg)
    prepare(cfg)
    build_corpora(cfg)
    t = lap("corpora", t)
    target_train.train(lm_config(cfg, "target"))
    t = lap("target", t)
    env = {**os.environ, "OMP_NUM_THREADS": str(cfg.head_threads), "CUDA_VISIBLE_DEVICES": ""}
    head = subprocess.Popen(head_command(cfg), env=env)   # on the CPU cores while the GPU trains the draft
    try:
        target_train.train(lm_config(cfg, "draft"))
        t = lap("draft", t)
        results = evaluate_target(cfg)
        (cfg.model("target") / "eval_v3.json").write_text(json.dumps(results, indent=1) + "\n")
        with open(cfg.model("target") / "README.md", "a") as card:
            card.write(card_section(results))
        t = lap("eval", t)
    except BaseException:
        head.kill()    # the run failed: no reason to wait out the head's budget
        head.wait()
        raise
    if head.wait() != 0:
        raise RuntimeError(f"the EAGLE-3 head's training failed (exit {head.returncode}): {head.args}")
    t = lap("head (after the draft and the evaluation)", t)
    for role in ("target", "draft", "eagle3"):
        write_manifest(cfg.model(role))
    minutes["total"] = round((time.monotonic() - t0) / 60, 2)
    print(json.dumps({"minutes": minutes}), flush=True)
    return {"minutes": minutes, "eval": results}


def _args_of(cfg: V3Config) -> list[str]:
    d = V3Config()
    out = []
    for f in dataclasses.fields(V3Config):
        v = getattr(cfg, f.name)
        if v != getattr(d, f.name):
            flag = "--" + f.name.replace("_", "-")
            out += [flag, ",".join(map(str, v)) if isinstance(v, tuple) else str(v)]
    return out


def add_args(p: argparse.ArgumentParser) -> None:
    for f in dataclasses.fields(V3Config):
        flag, default = "--" + f.name.replace("_", "-"), f.default
        if isinstance(default, tuple):
            p.add_argument(flag, default=",".join(map(str, default)), help=f"comma-separated (default {default})")
        elif default is None:
            p.add_argument(flag, default=None, type=int if f.name == "steps" else str)
        else:
            p.add_argument(flag, default=default, type=type(default), help=f"default {default}")


def config_from_args(a: argparse.Namespace) -> V3Config:
    kw = {f.name: getattr(a, f.name) for f in dataclasses.fields(V3Config)}
    kw["transcripts"] = tuple(int(x) for x in str(kw["transcripts"]).split(","))
    return V3Config(**kw)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tandem_demo v3", description=__doc__.splitlines()[0])
    add_args(p)
    run(config_from_args(p.parse_args(argv)))


if __name__ == "__main__":
    main()
