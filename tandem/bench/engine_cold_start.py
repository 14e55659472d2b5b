"""Cold start: process start to ready, against the time to read the weights plus interpreter start.

"Ready" = a fresh process has imported tandem, loaded the model with Engine.from_config and
produced the first token of a 1-token request. The parent times it from spawn to the child's
JSON line on stdout (process exit is not counted); the child adds its own split (import, load, first request).

Baselines, measured in the same run:
- read: reading every byte of the checkpoint's *.safetensors files (read(2) into one 16 MiB
  buffer, in this process; `cat > /dev/null` may skip the reads with copy_file_range);
- interpreter: `python -c pass` and `python -c "import torch"` (each prints a line);
- transformers (for reference): import, from_pretrained, one generated token.
With `cold=True` the page cache is dropped (root only: /proc/sys/vm/drop_caches) before each
timed process, so every number includes reading its files from disk; otherwise all are warm.
tandem's modules are compiled to bytecode first, as an installed package ships them.

Run `python -m tandem.bench.engine_cold_start MODEL_DIR DTYPE THREADS [tandem|hf]` for the child.
"""

from __future__ import annotations

import compileall
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from tandem.bench.engine_measure import hf_generate, load_hf_model
from tandem.config import EngineConfig, ModelConfig
from tandem.engine.engine import Engine
from tandem.types import EngineRequest, SamplingParams


@dataclass(frozen=True)
class ColdStartRun:
    cold: bool                  # page cache dropped before each timed process
    ready_s: float              # tandem: spawn -> first token
    child: dict                 # tandem child's own split: import_s, load_s, first_request_s
    read_s: float               # read(2) of every *.safetensors byte
    python_s: float             # python -c pass (to its first printed line)
    import_torch_s: float       # python -c "import torch"
    hf_ready_s: float | None    # transformers: spawn -> first token (reference)

    def to_dict(self) -> dict:
        return {"cold": self.cold, "ready_s": self.ready_s, "child": self.child, "read_s": self.read_s,
                "python_s": self.python_s, "import_torch_s": self.import_torch_s,
                "hf_ready_s": self.hf_ready_s}


def drop_page_cache() -> bool:
    """Drop the page cache (needs root and a writable /proc/sys). False when not allowed."""
    try:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def _child_env() -> dict[str, str]:
    # the child imports this checkout's tandem whether or not it is installed
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _timed(cmd: list[str], cold: bool) -> tuple[float, str]:
    """Seconds from spawn to the child's first stdout line (its exit is not counted), and the line."""
    if cold:
        drop_page_cache()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_child_env())
    line = proc.stdout.readline()
    seconds = time.perf_counter() - t0
    _, err = proc.communicate()
    if proc.returncode != 0 or not line:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {err[-2000:]}")
    return seconds, line


def read_files_s(files: list[str], cold: bool) -> float:
    if cold:
        drop_page_cache()
    buf = bytearray(16 * 2**20)
    t0 = time.perf_counter()
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            while fh.readinto(buf):
                pass
    return time.perf_counter() - t0


def ensure_bytecode() -> None:
    """Compile tandem's modules, as an installed (non-editable) package has them: a checkout's
    sources would otherwise be compiled again in the timed process (always, under
    PYTHONDONTWRITEBYTECODE), while torch's site-packages load bytecode."""
    compileall.compile_dir(str(Path(__file__).resolve().parents[1]), quiet=1)


def measure(model_dir: str, dtype: str, threads: int, cold: bool, with_hf: bool = True) -> ColdStartRun:
    ensure_bytecode()
    py = sys.executable
    child = [py, "-m", "tandem.bench.engine_cold_start", model_dir, dtype, str(threads)]
    ready_s, line = _timed(child + ["tandem"], cold)
    hf_ready_s = _timed(child + ["hf"], cold)[0] if with_hf else None
    files = sorted(str(p) for p in Path(model_dir).glob("*.safetensors"))
    read_s = read_files_s(files, cold)
    python_s = _timed([py, "-c", "print(0)"], cold)[0]
    import_torch_s = _timed([py, "-c", "import torch; print(0)"], cold)[0]
    return ColdStartRun(cold, ready_s, json.loads(line), read_s, python_s, import_torch_s, hf_ready_s)


def _child(model_dir: str, dtype: str, threads: int, which: str) -> dict:
    """Runs in the fresh process: import, load, one 1-token greedy request; returns the split."""
    t0 = time.perf_counter()

    torch.set_num_threads(threads)
    if which == "hf":
        t1 = time.perf_counter()
        model = load_hf_model(model_dir, dtype)
        t2 = time.perf_counter()
        ids = torch.tensor([[16, 17, 18, 19]])
        hf_generate(model, ids, torch.ones_like(ids), 1, pad_token_id=0)
    else:
        t1 = time.perf_counter()
        engine = Engine.from_config(EngineConfig(ModelConfig(model_dir, dtype=dtype, show_progress=False),
                                                 num_threads=threads))
        t2 = time.perf_counter()
        engine.add_request(EngineRequest("cold", [16, 17, 18, 19],
                                         SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)))
        while engine.has_work():
            engine.step()
    t3 = time.perf_counter()
    return {"import_s": t1 - t0, "load_s": t2 - t1, "first_request_s": t3 - t2}


if __name__ == "__main__":
    print(json.dumps(_child(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])), flush=True)
