"""`tandem bench serve`: one run of a workload against one server, written as a report.

Steps: ask the server its model (GET /v1/models), pick the token space for synthetic prompts,
build the workload, send it with a progress bar, write <out>/<label>.json (every sample),
<label>.md (summary) and the plots.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tandem.bench.agentic import AgenticConfig, agentic_workload
from tandem.bench.client import ClientConfig, StreamingClient, fetch_models
from tandem.bench.metrics import SLO, summarize
from tandem.bench.plots import plot_cdfs, plot_timeline
from tandem.bench.report import build_report, to_markdown, write_json
from tandem.bench.runner import LoadConfig, planned_requests, run_workload
from tandem.bench.sample import RequestSample
from tandem.bench.trace import TraceConfig, trace_workload
from tandem.bench.vocab import TokenSpace
from tandem.bench.workload import Workload


@dataclass(frozen=True)
class BenchConfig:
    url: str
    trace_path: str | None = None            # Mooncake trace; else the agentic generator
    trace: TraceConfig = field(default_factory=TraceConfig)
    agentic: AgenticConfig = field(default_factory=AgenticConfig)
    load: LoadConfig = field(default_factory=LoadConfig)
    slo: SLO = field(default_factory=SLO)
    model: str | None = None                 # default: the first model of GET /v1/models
    endpoint: str | None = None              # default: completions for traces, chat for agentic
    api_key: str | None = None
    tokenizer: str | None = None             # model directory giving the token space of trace prompts
    vocab_range: str | None = None           # "LO:HI" instead of a tokenizer
    ignore_eos: bool = True
    temperature: float = 0.0
    continuous_usage_stats: bool = False
    request_timeout_s: float = 600.0
    warmup: int = 1                          # unrecorded short requests before the run (lazy init)
    out_dir: str = "bench-results"
    label: str | None = None
    plots: bool = True
    progress: bool = True
    command: str = ""


@dataclass(frozen=True)
class BenchResult:
    report: dict
    json_path: Path
    md_path: Path
    plots: tuple[str, ...]


def token_space(cfg: BenchConfig, models: list[dict]) -> TokenSpace:
    if cfg.vocab_range:
        return TokenSpace.parse_range(cfg.vocab_range)
    if cfg.tokenizer:
        return TokenSpace.from_model_dir(cfg.tokenizer)
    for m in models:
        root = m.get("root")
        if isinstance(root, str) and os.path.isdir(root):
            return TokenSpace.from_model_dir(root)
    raise ValueError("trace replay needs the model's token ids: pass --tokenizer MODEL_DIR or "
                     "--vocab-range LO:HI (the server's /v1/models gave no local model directory)")


def build_workload(cfg: BenchConfig, models: list[dict]) -> Workload:
    if cfg.trace_path:
        return trace_workload(cfg.trace_path, token_space(cfg, models), cfg.trace)
    return agentic_workload(cfg.agentic)


def plots_available() -> bool:
    """matplotlib is optional: without it reports have no PNGs (and say so on stderr)."""
    try:
        import matplotlib  # noqa: F401
        return True
    except ImportError:
        print("tandem bench: matplotlib is not installed; no plots (pip install matplotlib)", file=sys.stderr)
        return False


async def warm_up(client: StreamingClient, n: int) -> None:
    """n short requests whose prompts share no full KV block with any workload prompt."""

    for i in range(n):
        messages = [{"role": "user", "content": f"Warm-up {i}."}]
        body = client.build_body(4, prompt_ids=None, messages=messages)
        reply = await client.send(body, RequestSample(request_id=f"warmup-{i}"), time.perf_counter())
        if not reply.sample.ok:
            raise RuntimeError(f"warm-up request failed: {reply.sample.error}")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "run"


async def run_bench(cfg: BenchConfig) -> BenchResult:
    models = await fetch_models(cfg.url, cfg.api_key)
    if not models and not cfg.model:
        raise ValueError(f"{cfg.url}/v1/models lists no model; pass --model")
    model = cfg.model or models[0]["id"]
    workload = build_workload(cfg, models)
    endpoint = cfg.endpoint or ("completions" if workload.uses_token_ids else "chat")
    if workload.uses_token_ids and endpoint != "completions":
        raise ValueError("trace replay sends token-id prompts, which only /v1/completions accepts")
    ccfg = ClientConfig(base_url=cfg.url, model=model, endpoint=endpoint, api_key=cfg.api_key,
                        ignore_eos=cfg.ignore_eos, temperature=cfg.temperature,
                        continuous_usage_stats=cfg.continuous_usage_stats,
                        request_timeout_s=cfg.request_timeout_s,
                        keep_text=not workload.uses_token_ids)
    total = planned_requests(workload, cfg.load)
    bar = None
    if cfg.progress:
        from tqdm import tqdm
        bar = tqdm(total=total, unit="req", desc="bench", dynamic_ncols=True)
    errors = 0

    def on_done(sample) -> None:
        nonlocal errors
        if bar is not None:
            errors += 0 if sample.ok else 1
            bar.update(1)
            if errors:
                bar.set_postfix(errors=errors, refresh=False)

    client = StreamingClient(ccfg)
    try:
        await warm_up(client, cfg.warmup)
        samples = await run_workload(workload, client, cfg.load, on_done)
    finally:
        await client.aclose()
        if bar is not None:
            bar.close()
    label = cfg.label or f"{workload.name}-{_slug(model)}"
    meta = {"command": cfg.command, "url": cfg.url, "model": model, "endpoint": endpoint,
            "workload": workload.params, "workload_ideal_cached_ratio": workload.ideal_cached_ratio(),
            "load": asdict(cfg.load),
            "client": {"ignore_eos": cfg.ignore_eos, "temperature": cfg.temperature,
                       "continuous_usage_stats": cfg.continuous_usage_stats}}
    report = build_report(label, samples, meta, cfg.slo)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = _slug(label)
    json_path, md_path = out / f"{stem}.json", out / f"{stem}.md"
    write_json(report, json_path)
    plots: list[str] = []
    if cfg.plots and plots_available():
        plots.append(plot_cdfs({label: samples}, out / f"{stem}-cdf.png"))
        plots.append(plot_timeline(samples, out / f"{stem}-timeline.png"))
    md_path.write_text(to_markdown(report, summarize(samples, cfg.slo), plots))
    return BenchResult(report, json_path, md_path, tuple(plots))


def run_bench_sync(cfg: BenchConfig) -> BenchResult:
    return asyncio.run(run_bench(cfg))
