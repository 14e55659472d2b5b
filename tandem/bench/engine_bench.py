"""`tandem bench engine`: engine microbenchmarks against HF transformers on the same weights.

For each dtype, on a Llama-shaped random model written once to a cache directory:
  (a) offline throughput: tandem LLM.generate over N mixed requests vs transformers `generate`
      in left-padded batches (every batch size tried in the first repetition, then the best
      one; the best median counts);
  (b) batch-1 decode: time per output token after the first;
  (c) cold start: spawn -> first token, vs reading the safetensors bytes plus interpreter start.
tandem and transformers run in the same process, same torch threads, interleaved repetition by
repetition (tandem, then transformers) so that load from other processes hits both alike;
every figure is the median over repetitions, and the verdicts are ratios within one run.

Goals (issue 2): (a) tandem >= 3x transformers; (b) tandem TPOT <= transformers TPOT;
(c) ready <= 2 x read + interpreter start (with `import torch`).

tandem/cli/bench.py calls `register_engine(sub)` with the `bench` subparsers;
benchmarks/engine_bench.py runs the same `main`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib.metadata import version
from pathlib import Path

import torch
from safetensors import safe_open

from tandem.bench.engine_cold_start import drop_page_cache, measure
from tandem.bench.engine_measure import (
    FIRST_PROMPT_ID,
    hf_decode,
    hf_throughput,
    load_hf_model,
    offline_workload,
    tandem_decode,
    tandem_throughput,
)
from tandem.config import CacheConfig, EngineConfig, ModelConfig, SchedulerConfig
from tandem.engine.llm import LLM
from tandem.testing.tiny_model import write_test_model

GOAL_THROUGHPUT_RATIO = 3.0   # tandem output tokens/s over transformers'
GOAL_COLD_READ_FACTOR = 2.0   # ready <= factor x read + interpreter start


@dataclass(frozen=True)
class ModelShape:
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    num_kv_heads: int = 4
    intermediate_size: int = 2048
    vocab_size: int = 32000
    seed: int = 0

    def num_params(self) -> int:
        """Exact parameter count of the Llama layout (untied lm_head, no biases)."""
        h, i, v = self.hidden_size, self.intermediate_size, self.vocab_size
        d = h // self.num_heads
        attn = h * (self.num_heads * d) * 2 + h * (self.num_kv_heads * d) * 2   # q, o + k, v
        layer = attn + 3 * h * i + 2 * h                                          # + mlp + 2 norms
        return 2 * v * h + self.num_layers * layer + h                            # embed, lm_head, final norm

    def tag(self) -> str:
        return f"{round(self.num_params() / 1e6)}m"


@dataclass(frozen=True)
class EngineBenchConfig:
    dtypes: tuple[str, ...] = ("float32", "bfloat16")
    threads: int = 2
    shape: ModelShape = field(default_factory=ModelShape)
    cache_dir: str = ".cache"            # models go to {cache_dir}/bench-llama-{tag}-{dtype}
    model_dir: str | None = None         # use this model (one dtype) instead of writing one
    repeats: int = 2
    num_requests: int = 64
    prompt_range: tuple[int, int] = (32, 512)
    output_range: tuple[int, int] = (16, 128)
    hf_batch_sizes: tuple[int, ...] = (16, 32)  # 8 lost to 16 in every trial on 2 CPU cores
    hf_orders: tuple[str, ...] = ("sorted", "arrival")  # how transformers' batches are formed
    decode_prompt: int = 128
    decode_tokens: int = 128
    decode_repeats: int = 3              # batch-1 runs are short and noisy: an odd count, a true median
    # tandem's step budget and chunk cap; default: the offline scheduler, SchedulerConfig.offline()
    max_num_batched_tokens: int = SchedulerConfig.offline().max_num_batched_tokens
    long_prefill_token_threshold: int = SchedulerConfig.offline().long_prefill_token_threshold
    parts: tuple[str, ...] = ("throughput", "decode", "cold")
    cold: str = "auto"                   # auto (drop the page cache if allowed) | warm
    hf_cold_start: bool = True           # also time transformers' cold start (reference)
    out: str = "bench-results/engine"    # directory for engine_bench.json and engine_bench.md
    seed: int = 0
    command: str = ""


# --- models -------------------------------------------------------------------------------------
def ensure_model(cfg: EngineBenchConfig, dtype: str) -> str:
    """The benchmark model for `dtype`, written on first use (random weights, fixed seed)."""
    if cfg.model_dir:
        return cfg.model_dir
    s = cfg.shape
    path = Path(cfg.cache_dir) / f"bench-llama-{s.tag()}-{dtype}"
    if not (path / "config.json").is_file():
        print(f"writing {path} ({s.num_params():,} parameters)", file=sys.stderr)
        write_test_model(path, "LlamaForCausalLM", hidden_size=s.hidden_size, num_layers=s.num_layers,
                         num_heads=s.num_heads, num_kv_heads=s.num_kv_heads,
                         intermediate_size=s.intermediate_size, vocab_size=s.vocab_size, dtype=dtype,
                         seed=s.seed)
    return str(path)


def count_params(model_dir: str) -> int:
    """Parameters stored in the checkpoint's safetensors files."""
    total = 0
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as h:
            for name in h.keys():
                n = 1
                for d in h.get_slice(name).get_shape():
                    n *= d
                total += n
    return total


# --- one dtype ----------------------------------------------------------------------------------
def tandem_llm(model_dir: str, dtype: str, cfg: EngineBenchConfig, kv_tokens: int):
    """tandem's offline engine as the benchmarks run it (peers scripts use it too): room in the KV
    cache for the whole workload, the step budget and chunk cap of `cfg`."""

    block = 16
    # room for every request of the workload at once, so the run measures batching, not preemption
    num_blocks = kv_tokens // block + 2 * cfg.num_requests + 16
    return LLM(EngineConfig(
        model=ModelConfig(model_dir, dtype=dtype, show_progress=False),
        cache=CacheConfig(block_size=block, num_blocks=num_blocks),
        scheduler=SchedulerConfig(max_num_batched_tokens=cfg.max_num_batched_tokens,
                                  long_prefill_token_threshold=cfg.long_prefill_token_threshold,
                                  max_num_seqs=cfg.num_requests),
        num_threads=cfg.threads))


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _median_run(runs: list[dict]) -> dict:
    """Each numeric field's median over the repetitions (the mean of two), plus every run."""
    med = {k: _median([r[k] for r in runs]) for k, v in runs[0].items() if isinstance(v, (int, float))}
    return {**med, "repeats": len(runs), "runs": runs}


def bench_dtype(cfg: EngineBenchConfig, dtype: str) -> dict:
    model_dir = ensure_model(cfg, dtype)
    result: dict = {"model_dir": model_dir}
    model_cfg = json.loads((Path(model_dir) / "config.json").read_text())
    vocab = model_cfg["vocab_size"]
    pad_id = model_cfg.get("pad_token_id") or 0  # left padding for transformers (masked out)
    workloads = [offline_workload(cfg.num_requests, cfg.prompt_range, cfg.output_range, vocab,
                                  lengths_seed=cfg.seed, tokens_seed=cfg.seed + 1000 * (r + 1))
                 for r in range(cfg.repeats)]
    kv_tokens = workloads[0].prompt_tokens + workloads[0].output_tokens
    if "throughput" in cfg.parts or "decode" in cfg.parts:
        t0 = time.perf_counter()
        llm = tandem_llm(model_dir, dtype, cfg, kv_tokens)
        hf = load_hf_model(model_dir, dtype)
        print(f"[{dtype}] engines loaded in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        _warm_up(llm, hf, vocab, pad_id)
        if "throughput" in cfg.parts:
            result["throughput"] = _throughput(cfg, dtype, llm, hf, workloads, pad_id)
        if "decode" in cfg.parts:
            result["decode"] = _decode(cfg, dtype, llm, hf, vocab, pad_id)
        llm.shutdown()
        del llm, hf
    if "cold" in cfg.parts:
        result["cold_start"] = _cold_start(cfg, dtype, model_dir)
    return result


def _warm_up(llm, hf, vocab: int, pad_id: int) -> None:
    wl = offline_workload(4, (8, 40), (2, 4), vocab, lengths_seed=7, tokens_seed=7)
    tandem_throughput(llm, wl)
    hf_throughput(hf, wl, 4, pad_id)


def _throughput(cfg, dtype, llm, hf, workloads, pad_id) -> dict:
    """tandem against transformers batched two ways (engine_measure.hf_throughput): the goal is
    judged against the fastest of all transformers settings (its best case, sorted batches)."""

    settings = [(order, b) for order in cfg.hf_orders for b in cfg.hf_batch_sizes]
    tandem_runs: list[dict] = []
    hf_runs: dict[tuple[str, int], list[dict]] = {s: [] for s in settings}
    for rep, wl in enumerate(workloads):
        run = tandem_throughput(llm, wl).to_dict()
        tandem_runs.append(run)
        print(f"[{dtype}] throughput rep {rep}: tandem {run['output_tps']:.1f} out tok/s "
              f"({run['seconds']:.1f}s)", file=sys.stderr)
        # every setting in the first repetition; then the best batch size per order (keeps it short)
        todo = settings if rep == 0 else [_best_setting(hf_runs, order) for order in cfg.hf_orders]
        for order, b in todo:
            run = hf_throughput(hf, wl, b, pad_id, order).to_dict()
            hf_runs[(order, b)].append(run)
            print(f"[{dtype}] throughput rep {rep}: transformers {order} bs={b} "
                  f"{run['output_tps']:.1f} out tok/s ({run['seconds']:.1f}s)", file=sys.stderr)
    tandem = _median_run(tandem_runs)
    medians = {s: _median_run(runs) for s, runs in hf_runs.items() if runs}

    def best(orders) -> dict:
        order, b = max((s for s in medians if s[0] in orders), key=lambda s: medians[s]["output_tps"])
        return {"order": order, "batch_size": b, **medians[(order, b)]}

    strict = best(cfg.hf_orders)
    by_order = {order: best((order,)) for order in cfg.hf_orders}
    wl = workloads[0]
    ratio = tandem["output_tps"] / strict["output_tps"]
    return {
        "workload": {"num_requests": cfg.num_requests, "prompt_range": list(cfg.prompt_range),
                     "output_range": list(cfg.output_range), "prompt_tokens": wl.prompt_tokens,
                     "output_tokens": wl.output_tokens},
        "tandem": tandem,
        "tandem_scheduler": {"max_num_batched_tokens": cfg.max_num_batched_tokens,
                             "long_prefill_token_threshold": cfg.long_prefill_token_threshold},
        "transformers": strict,
        "transformers_by_order": by_order,
        "transformers_by_setting": {f"{o}/{b}": r for (o, b), r in medians.items()},
        "ratio_output_tps": ratio,
        "ratio_total_tps": tandem["total_tps"] / strict["total_tps"],
        "ratio_output_tps_by_order": {o: tandem["output_tps"] / r["output_tps"] for o, r in by_order.items()},
        "goal": f">= {GOAL_THROUGHPUT_RATIO}x",
        "goal_met": ratio >= GOAL_THROUGHPUT_RATIO,
    }


def _best_setting(hf_runs: dict[tuple[str, int], list[dict]], order: str) -> tuple[str, int]:
    return max((s for s in hf_runs if s[0] == order and hf_runs[s]),
               key=lambda s: _median([r["output_tps"] for r in hf_runs[s]]))


def _decode(cfg, dtype, llm, hf, vocab: int, pad_id: int) -> dict:
    tandem_runs, hf_runs, agree = [], [], []
    for rep in range(cfg.decode_repeats):
        rng = random.Random(cfg.seed + 77 + rep)
        prompt = [rng.randrange(FIRST_PROMPT_ID, vocab) for _ in range(cfg.decode_prompt)]
        t = tandem_decode(llm, prompt, cfg.decode_tokens, f"decode-{rep}")
        h = hf_decode(hf, prompt, cfg.decode_tokens, pad_id)
        tandem_runs.append(t.to_dict())
        hf_runs.append(h.to_dict())
        agree.append(_agreement(t.tokens, h.tokens))
        print(f"[{dtype}] decode rep {rep}: tandem {1e3 * t.tpot_s:.2f} ms/token, transformers "
              f"{1e3 * h.tpot_s:.2f} ms/token", file=sys.stderr)
    tandem = _median_run(tandem_runs)
    hf_med = _median_run(hf_runs)
    return {
        "prompt_tokens": cfg.decode_prompt, "new_tokens": cfg.decode_tokens,
        "tandem": tandem, "transformers": hf_med,
        "ratio_tpot": tandem["tpot_s"] / hf_med["tpot_s"],
        "greedy_tokens_matching": agree,   # leading tokens equal, per repetition (numerics may differ)
        "goal": "tandem TPOT <= transformers TPOT",
        "goal_met": tandem["tpot_s"] <= hf_med["tpot_s"],
    }


def _agreement(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _cold_start(cfg: EngineBenchConfig, dtype: str, model_dir: str) -> dict:
    """Warm page cache always; dropped page cache too when allowed (cfg.cold == "auto", root)."""
    modes = ["warm"]
    if cfg.cold == "auto" and drop_page_cache():
        modes.insert(0, "cold")
    return {mode: _cold_start_mode(cfg, dtype, model_dir, mode == "cold") for mode in modes}


def _cold_start_mode(cfg: EngineBenchConfig, dtype: str, model_dir: str, cold: bool) -> dict:
    if not cold:
        # untimed pass: a warm measurement must find every file its processes read in the page
        # cache, including after a dropped-cache mode left only the last baseline's files there
        measure(model_dir, dtype, cfg.threads, cold=False, with_hf=cfg.hf_cold_start)
    runs = []
    for rep in range(cfg.repeats):
        run = measure(model_dir, dtype, cfg.threads, cold, with_hf=cfg.hf_cold_start).to_dict()
        runs.append(run)
        print(f"[{dtype}] cold start rep {rep} ({'dropped' if cold else 'warm'} page cache): ready "
              f"{run['ready_s']:.2f}s, read {run['read_s']:.2f}s, import torch {run['import_torch_s']:.2f}s",
              file=sys.stderr)
    med = {k: _median([r[k] for r in runs]) for k in ("ready_s", "read_s", "python_s", "import_torch_s")}
    if cfg.hf_cold_start:
        med["hf_ready_s"] = _median([r["hf_ready_s"] for r in runs])
    med["child"] = {k: _median([r["child"][k] for r in runs]) for k in runs[0]["child"]}
    bound = GOAL_COLD_READ_FACTOR * med["read_s"] + med["import_torch_s"]
    strict = GOAL_COLD_READ_FACTOR * med["read_s"] + med["python_s"]
    return {
        "page_cache": "dropped" if cold else "warm",
        **med, "runs": runs,
        "bound_s": bound, "bound_strict_s": strict,
        "ratio_to_bound": med["ready_s"] / bound,
        "goal": f"ready <= {GOAL_COLD_READ_FACTOR:g} x read + interpreter start with import torch",
        "goal_met": med["ready_s"] <= bound,
        "goal_met_strict": med["ready_s"] <= strict,   # interpreter start without torch
    }


# --- the whole run --------------------------------------------------------------------------------
def machine() -> dict:
    cpu = platform.processor()
    ram_kb = 0
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram_kb = int(line.split()[1])
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": cpu, "ram_gib": round(ram_kb / 2**20, 1),
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "python": sys.version.split()[0], "torch": torch.__version__,
            "transformers": _version("transformers")}


def _version(pkg: str) -> str | None:
    try:
        return version(pkg)
    except Exception:  # noqa: BLE001 - informational only
        return None


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run(cfg: EngineBenchConfig) -> dict:
    torch.set_num_threads(cfg.threads)
    t0 = time.perf_counter()
    report: dict = {
        "schema": "tandem.bench.engine/1",
        "meta": {"command": cfg.command, "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                 "machine": machine(), "commit": _commit(), "threads": cfg.threads,
                 "load_avg_start": _load(),
                 "config": _config_dict(cfg)},
        "model": {"shape": asdict(cfg.shape), "num_params": None},
        "results": {},
    }
    for dtype in cfg.dtypes:
        report["results"][dtype] = bench_dtype(cfg, dtype)
        if report["model"]["num_params"] is None:
            report["model"]["num_params"] = count_params(report["results"][dtype]["model_dir"])
    report["meta"]["load_avg_end"] = _load()
    report["meta"]["seconds"] = round(time.perf_counter() - t0, 1)
    return report


def _commit() -> str | None:
    """This checkout's commit (short), with "+dirty" for uncommitted changes; None outside git."""
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                              text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _config_dict(cfg: EngineBenchConfig) -> dict:
    d = asdict(cfg)
    d.pop("command")
    return d


def markdown(report: dict) -> str:
    """The figures as a markdown table, tandem against transformers in the same run."""
    m = report["meta"]
    mach = m["machine"]
    lines = [
        f"Model: Llama-shaped random, {report['model']['num_params']:,} parameters "
        f"({_shape_text(report['model']['shape'])}).",
        f"Machine: {mach['nproc']} CPUs ({mach['cpu']}, {mach['torch_cpu_capability']}), "
        f"{mach['ram_gib']} GiB RAM; torch {mach['torch']}, transformers {mach['transformers']}, "
        f"{m['threads']} torch threads; load average {m['load_avg_start']} at start, "
        f"{m['load_avg_end']} at end; {m['date']}; commit {m.get('commit')}; {m['seconds']} s.",
        "",
        "| dtype | measurement | tandem | transformers | ratio | goal | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for dtype, r in report["results"].items():
        if "throughput" in r:
            t = r["throughput"]
            hf = t["transformers"]
            lines.append(f"| {dtype} | offline output tok/s ({t['workload']['num_requests']} req) | "
                         f"{t['tandem']['output_tps']:.1f} | {hf['output_tps']:.1f} ({hf['order']}, bs "
                         f"{hf['batch_size']}) | {t['ratio_output_tps']:.2f}x | {t['goal']} | {_yes(t['goal_met'])} |")
            for order, o in t["transformers_by_order"].items():
                if order != hf["order"]:
                    lines.append(f"| {dtype} | offline output tok/s, transformers batched in {order} order | "
                                 f"{t['tandem']['output_tps']:.1f} | {o['output_tps']:.1f} (bs {o['batch_size']}) | "
                                 f"{t['ratio_output_tps_by_order'][order]:.2f}x | | |")
            lines.append(f"| {dtype} | offline total tok/s | {t['tandem']['total_tps']:.1f} | "
                         f"{hf['total_tps']:.1f} | {t['ratio_total_tps']:.2f}x | | |")
        if "decode" in r:
            d = r["decode"]
            lines.append(f"| {dtype} | batch-1 decode ms/token | {1e3 * d['tandem']['tpot_s']:.2f} | "
                         f"{1e3 * d['transformers']['tpot_s']:.2f} | {d['ratio_tpot']:.2f}x | <= 1.00x | "
                         f"{_yes(d['goal_met'])} |")
            lines.append(f"| {dtype} | batch-1 TTFT ms ({d['prompt_tokens']}-token prompt) | "
                         f"{1e3 * d['tandem']['ttft_s']:.1f} | {1e3 * d['transformers']['ttft_s']:.1f} | "
                         f"{d['tandem']['ttft_s'] / d['transformers']['ttft_s']:.2f}x | | |")
        for mode, c in r.get("cold_start", {}).items():
            hf = f"{c['hf_ready_s']:.2f}" if c.get("hf_ready_s") is not None else "-"
            lines.append(f"| {dtype} | start to first token s ({c['page_cache']} page cache) | "
                         f"{c['ready_s']:.2f} | {hf} | {c['ratio_to_bound']:.2f}x of bound "
                         f"{c['bound_s']:.2f} s | <= 2 x read {c['read_s']:.2f} + import torch "
                         f"{c['import_torch_s']:.2f} (bare python {c['python_s']:.2f}) | "
                         f"{_yes(c['goal_met'])} |")
    return "\n".join(lines) + "\n"


def _shape_text(s: dict) -> str:
    return (f"hidden {s['hidden_size']}, {s['num_layers']} layers, {s['num_heads']} heads, "
            f"{s['num_kv_heads']} KV heads, intermediate {s['intermediate_size']}, vocab {s['vocab_size']}")


def _yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


def write_report(report: dict, out_dir: str, stem: str = "engine_bench",
                 render: Callable[[dict], str] = markdown) -> tuple[Path, Path]:
    """{out_dir}/{stem}.json (the report) and {stem}.md (`render(report)`)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / f"{stem}.json", out / f"{stem}.md"
    json_path.write_text(json.dumps(report, indent=2) + "\n")
    md_path.write_text(render(report))
    return json_path, md_path


# --- command line -----------------------------------------------------------------------------------
def parse_range(text: str) -> tuple[int, int]:
    """"LO:HI" (or "N") -> (LO, HI)."""
    lo, _, hi = text.partition(":")
    return int(lo), int(hi or lo)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x)


def add_args(p: argparse.ArgumentParser) -> None:
    d = EngineBenchConfig()
    s = ModelShape()
    p.add_argument("--dtypes", default=",".join(d.dtypes), help="comma-separated (default float32,bfloat16)")
    p.add_argument("--threads", type=int, default=d.threads, help="torch threads for both engines (default 2)")
    p.add_argument("--model-dir", help="benchmark this model directory (give one dtype) instead of writing one")
    p.add_argument("--cache-dir", default=d.cache_dir, help="where the random models are written (default .cache)")
    p.add_argument("--hidden-size", type=int, default=s.hidden_size)
    p.add_argument("--num-layers", type=int, default=s.num_layers)
    p.add_argument("--num-heads", type=int, default=s.num_heads)
    p.add_argument("--num-kv-heads", type=int, default=s.num_kv_heads)
    p.add_argument("--intermediate-size", type=int, default=s.intermediate_size)
    p.add_argument("--vocab-size", type=int, default=s.vocab_size)
    p.add_argument("--repeats", type=int, default=d.repeats, help="repetitions per measurement; medians reported")
    p.add_argument("--num-requests", type=int, default=d.num_requests)
    p.add_argument("--prompt-range", default="32:512", help="prompt tokens LO:HI, uniform (default 32:512)")
    p.add_argument("--output-range", default="16:128", help="output tokens LO:HI, uniform (default 16:128)")
    p.add_argument("--hf-batch-sizes", default=",".join(map(str, d.hf_batch_sizes)),
                   help="transformers batch sizes to try (default 16,32)")
    p.add_argument("--decode-prompt", type=int, default=d.decode_prompt)
    p.add_argument("--decode-tokens", type=int, default=d.decode_tokens)
    p.add_argument("--decode-repeats", type=int, default=d.decode_repeats,
                   help="batch-1 decode repetitions (default 3)")
    p.add_argument("--max-num-batched-tokens", type=int, default=d.max_num_batched_tokens,
                   help="tandem's token budget per step (default: the offline scheduler's)")
    p.add_argument("--long-prefill-token-threshold", type=int, default=d.long_prefill_token_threshold,
                   help="tandem's prefill chunk cap while others wait (0: none)")
    p.add_argument("--hf-orders", default=",".join(d.hf_orders),
                   help="how transformers' batches are formed: sorted (by output length), arrival")
    p.add_argument("--parts", default=",".join(d.parts), help="subset of throughput,decode,cold")
    p.add_argument("--cold", choices=("auto", "warm"), default=d.cold,
                   help="auto: drop the page cache before each cold-start process when allowed (root)")
    p.add_argument("--no-hf-cold-start", action="store_true", help="skip transformers' cold start")
    p.add_argument("--out", default=d.out, help="output directory (default bench-results/engine)")
    p.add_argument("--seed", type=int, default=d.seed)


def config_from_args(args: argparse.Namespace, command: str) -> EngineBenchConfig:
    parts = tuple(x for x in args.parts.split(",") if x)
    unknown = set(parts) - {"throughput", "decode", "cold"}
    if unknown:
        raise SystemExit(f"--parts: unknown {sorted(unknown)}; choose from throughput,decode,cold")
    dtypes = tuple(x for x in args.dtypes.split(",") if x)
    if args.model_dir and len(dtypes) != 1:
        raise SystemExit("--model-dir benchmarks one checkpoint: give exactly one --dtypes")
    return EngineBenchConfig(
        dtypes=dtypes, threads=args.threads,
        shape=ModelShape(args.hidden_size, args.num_layers, args.num_heads, args.num_kv_heads,
                         args.intermediate_size, args.vocab_size),
        cache_dir=args.cache_dir, model_dir=args.model_dir, repeats=args.repeats,
        num_requests=args.num_requests, prompt_range=parse_range(args.prompt_range),
        output_range=parse_range(args.output_range), hf_batch_sizes=_ints(args.hf_batch_sizes),
        decode_prompt=args.decode_prompt, decode_tokens=args.decode_tokens,
        decode_repeats=args.decode_repeats,
        max_num_batched_tokens=args.max_num_batched_tokens,
        long_prefill_token_threshold=args.long_prefill_token_threshold,
        hf_orders=tuple(o for o in args.hf_orders.split(",") if o), parts=parts, cold=args.cold,
        hf_cold_start=not args.no_hf_cold_start, out=args.out, seed=args.seed, command=command)


def _cmd(args: argparse.Namespace) -> int:
    cfg = config_from_args(args, getattr(args, "command_line", "") or shlex.join(["tandem", *sys.argv[1:]]))
    print(f"model: {cfg.shape.num_params():,} parameters", file=sys.stderr)
    report = run(cfg)
    json_path, md_path = write_report(report, cfg.out)
    print(markdown(report), end="")
    print(f"report: {json_path} {md_path}")
    return 0


def register_engine(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `engine` to the `tandem bench` subcommands."""
    p = subparsers.add_parser("engine", help="engine microbenchmarks against transformers (throughput, "
                                             "batch-1 decode, cold start)")
    add_args(p)
    p.set_defaults(func=_cmd)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="engine_bench", description=__doc__.splitlines()[0])
    add_args(parser)
    args = parser.parse_args(argv)
    args.command_line = shlex.join(["python", *sys.argv])
    return _cmd(args)
