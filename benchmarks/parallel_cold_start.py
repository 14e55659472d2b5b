"""Cold start of a parallel worker against the raw read time of its shards (issue 22, item 7).

"Ready" = a fresh process has imported tandem, started the worker (TP 1: Engine.from_config;
TP N: parallel_engine, which spawns ranks 1.. that import torch and tandem and load their own
slices of the safetensors files at the same time as rank 0) and produced the first token of a
1-token request; timed by the parent from spawn to the child's JSON line. Baselines in the same
run: read(2) of every *.safetensors byte, and `python -c "import torch"`. With the page cache
dropped before each timed step (`echo 3 > /proc/sys/vm/drop_caches`, root only) and warm.
The model is benchmarks/parallel_moe.py's (DeepSeek-V3 architecture, MoE + MLA, bfloat16),
written once under --dir (on disk: a tmpfs would keep it in memory).

    .venv/bin/python benchmarks/parallel_cold_start.py [--repeats 3] [--dir /tmp/tandem-cold-moe]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's tandem

from tandem.bench.engine_cold_start import drop_page_cache, ensure_bytecode, read_files_s  # noqa: E402


def _timed(cmd: list[str], cold: bool) -> tuple[float, str]:
    """Seconds from spawn to the child's first stdout line, and the line."""
    if cold:
        drop_page_cache()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    seconds = time.perf_counter() - t0
    _, err = proc.communicate(timeout=120)
    if proc.returncode != 0 or not line:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {err[-2000:]}")
    return seconds, line


def _child(model_dir: str, tp: int) -> dict:
    """In the fresh process: import, start the worker, one 1-token greedy request; the split."""
    t0 = time.perf_counter()
    import torch

    torch.set_num_threads(1)
    from tandem.config import CacheConfig, EngineConfig, ModelConfig
    from tandem.engine.engine import Engine
    from tandem.parallel.config import ParallelConfig
    from tandem.parallel.launch import parallel_engine
    from tandem.types import EngineRequest, SamplingParams

    t1 = time.perf_counter()
    cfg = EngineConfig(model=ModelConfig(path=model_dir, show_progress=False, pack_weights=False),
                       cache=CacheConfig(block_size=16, num_blocks=256), num_threads=1)
    engine = Engine.from_config(cfg) if tp == 1 else parallel_engine(cfg, ParallelConfig(tensor_parallel_size=tp))
    t2 = time.perf_counter()
    engine.add_request(EngineRequest("cold", [16, 17, 18, 19],
                                     SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)))
    while engine.has_work():
        engine.step()
    t3 = time.perf_counter()
    print(json.dumps({"import_s": t1 - t0, "start_s": t2 - t1, "first_request_s": t3 - t2}), flush=True)
    engine.shutdown()
    return {}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default="/tmp/tandem-cold-moe")
    ap.add_argument("--child", nargs=2, metavar=("MODEL_DIR", "TP"))
    args = ap.parse_args()
    if args.child:
        _child(args.child[0], int(args.child[1]))
        return
    from benchmarks.parallel_moe import SMALL
    from tandem.testing.tiny_model import write_test_model

    path = Path(args.dir)
    if not list(path.glob("*.safetensors")):
        path = write_test_model(path, "DeepseekV3ForCausalLM", seed=0, **SMALL)
    files = sorted(str(p) for p in path.glob("*.safetensors"))
    nbytes = sum(Path(f).stat().st_size for f in files)
    ensure_bytecode()
    py, me = sys.executable, str(Path(__file__).resolve())
    rows: dict[tuple[bool, str], list[float]] = {}
    splits: dict[tuple[bool, str], list[dict]] = {}
    for rep in range(args.repeats):
        for cold in (True, False):
            if not cold and rep == 0:
                _timed([py, me, "--child", str(path), "2"], False)     # untimed: warm every file
            rows.setdefault((cold, "read"), []).append(read_files_s(files, cold))
            rows.setdefault((cold, "torch"), []).append(_timed([py, "-c", "import torch; print(0)"], cold)[0])
            for tp in (1, 2):
                s, line = _timed([py, me, "--child", str(path), str(tp)], cold)
                rows.setdefault((cold, f"TP {tp}"), []).append(s)
                splits.setdefault((cold, f"TP {tp}"), []).append(json.loads(line))
    print(f"{nbytes / 2**20:.1f} MiB of shards ({len(files)} files), {args.repeats} repetitions, median (min-max)\n")
    print("| page cache | read shards (s) | python -c 'import torch' (s) | TP 1 ready (s) | TP 2 ready (s) "
          "| TP 1 split: import / start / first token | TP 2 split |")
    print("|---|---|---|---|---|---|---|")
    for cold in (True, False):
        def cell(name: str) -> str:
            v = rows[(cold, name)]
            return f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})"

        def split(name: str) -> str:
            parts = splits[(cold, name)]
            return " / ".join(f"{statistics.median(p[k] for p in parts):.2f}"
                              for k in ("import_s", "start_s", "first_request_s"))

        print(f"| {'dropped' if cold else 'warm'} | {cell('read')} | {cell('torch')} | {cell('TP 1')} | "
              f"{cell('TP 2')} | {split('TP 1')} | {split('TP 2')} |")


if __name__ == "__main__":
    main()
