"""Throughput floor: the same workload through Hugging Face transformers `generate`, offline.

One request at a time (batch 1, no KV reuse between requests), greedy, exactly `max_tokens`
new tokens (EOS suppressed, as `ignore_eos` does for the servers). Every generated token's
time is recorded by a stopping-criteria hook, so the output is a regular `tandem bench`
report (TTFT, ITL, TPOT, e2e) that `tandem bench compare` puts beside the servers' runs.

    .venv/bin/python benchmarks/peers/transformers_floor.py --model MODEL_DIR \
        --trace ../shared/traces/mooncake_conversation_trace.jsonl --max-requests 20 \
        --max-input-tokens 1024 --max-output-tokens 32 --out bench-results/peers

Takes the same workload flags as `tandem bench serve` (server-only flags are ignored).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repo root, for `tandem`

from tandem.cli.bench import add_workload_args, config_from_args
from tandem.bench.metrics import summarize
from tandem.bench.plots import plot_cdfs, plot_timeline
from tandem.bench.report import build_report, to_markdown, write_json
from tandem.bench.runner import chat_ideal_cached_tokens
from tandem.bench.sample import RequestSample
from tandem.bench.serve import build_workload, plots_available


class TokenClock:
    """StoppingCriteria hook: called once per generated token; records when (never stops)."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def __call__(self, input_ids, scores, **kwargs):
        self.times.append(time.perf_counter())
        return torch.zeros(input_ids.shape[0], dtype=torch.bool)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", dest="model_dir", required=True, help="Hugging Face model directory")
    p.add_argument("--threads", type=int, default=1, help="torch threads (match the server's cores)")
    p.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16"))
    add_workload_args(p, model_flag="--served-model")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = config_from_args(args, url="offline")
    cfg = replace(cfg, tokenizer=cfg.tokenizer or args.model_dir,
                  command=shlex.join(["python", *sys.argv]))
    workload = build_workload(cfg, models=[])
    tok = AutoTokenizer.from_pretrained(args.model_dir)
    dtype = "auto" if args.dtype == "auto" else getattr(torch, args.dtype)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=dtype).eval()

    samples: list[RequestSample] = []
    limit = cfg.load.max_requests
    t0 = time.perf_counter()
    deadline = None if cfg.load.duration_s is None else t0 + cfg.load.duration_s
    for session in workload.sessions:
        history = list(session.base_messages)
        prev_text = ""
        for k, turn in enumerate(session.turns):
            if (limit is not None and len(samples) >= limit) or (deadline and time.perf_counter() > deadline):
                break
            if workload.uses_token_ids:
                ids = torch.as_tensor(turn.prompt_token_ids, dtype=torch.long)[None, :]
            else:
                if k > 0:
                    history += [{"role": "assistant", "content": prev_text}, *turn.new_messages]
                text = tok.apply_chat_template(history, tools=list(session.tools) if session.tools else None,
                                               add_generation_prompt=True, tokenize=False)
                ids = tok(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
            clock = TokenClock()
            start = time.perf_counter()
            with torch.inference_mode():
                out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                     max_new_tokens=turn.max_tokens, min_new_tokens=turn.max_tokens,
                                     stopping_criteria=[clock], pad_token_id=tok.pad_token_id or 0)
            end = time.perf_counter()
            new = out[0, ids.shape[1]:]
            prev_text = tok.decode(new, skip_special_tokens=True)
            samples.append(RequestSample(
                request_id=turn.request_id, session_id=session.session_id, tenant=session.tenant, turn=k,
                start=start - t0, end=end - t0, chunk_times=[t - start for t in clock.times],
                chunk_tokens=[1] * len(clock.times), prompt_tokens=int(ids.shape[1]),
                completion_tokens=int(new.numel()), expected_prompt_tokens=turn.expected_prompt_tokens,
                expected_output_tokens=turn.max_tokens, ideal_cached_tokens=turn.ideal_cached_tokens,
                finish_reason="length", status=200))
            if not workload.uses_token_ids:   # same definition as tandem bench serve (usage-based)
                samples[-1].ideal_cached_tokens = chat_ideal_cached_tokens(
                    samples[-1], turn.expected_prompt_tokens, samples[-2] if k > 0 else None)
            print(f"\r{len(samples)} requests", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)

    label = cfg.label or "transformers-floor"
    meta = {"command": cfg.command, "url": "offline (transformers generate, batch 1)",
            "model": args.model_dir, "endpoint": "generate", "workload": workload.params,
            "load": {"concurrency": 1, "max_requests": limit, "threads": args.threads},
            "client": {"ignore_eos": True, "temperature": 0.0}}
    report = build_report(label, samples, meta, cfg.slo)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json(report, out / f"{label}.json")
    plots = [] if not (cfg.plots and plots_available()) else [plot_cdfs({label: samples}, out / f"{label}-cdf.png"),
                                      plot_timeline(samples, out / f"{label}-timeline.png")]
    summary = summarize(samples, cfg.slo)
    (out / f"{label}.md").write_text(to_markdown(report, summary, plots))
    print(f"{summary.completed} requests, {summary.output_throughput:.1f} output tok/s, "
          f"TTFT p50 {1000 * (summary.ttft.p50 or 0):.1f} ms, TPOT p50 {1000 * (summary.tpot.p50 or 0):.1f} ms")
    print(f"report: {out / (label + '.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
