"""Speculative decoding on the demo models: decode tokens/s at batch 1, 8 and 32 for each proposer
(ngram, suffix, draft_model, suffix_draft: suffix decoding with the draft model behind it,
`{"method": "suffix", "model": DRAFT}`, and eagle3: the EAGLE-3 head of models/tandem-demo-eagle3
fed with the target's hidden states) beside no speculation, on (a) tool-call turns and (b) prose, greedy,
every output checked identical to the no-speculation run.

  python benchmarks/spec_decode.py --reps 3 --out spec_decode.json

Workloads (deterministic):
- tool-call turns: the turns carrying tool calls in the demo corpus's held-out transcripts, in
  order (tandem_demo.corpus.build_transcripts, the demo evaluation's held-out split and order),
  each prompt the conversation so far rendered with the chat template (later turns carry the
  earlier calls and results), each output ending at the end of the turn (<|im_end|>) or
  max_tokens;
- prose: the held-out KJV chapters (tandem_demo.corpus.split_chapters), the reference and first
  two verses as the prompt, continued for max_tokens tokens.
Each batch size B runs the same `--requests` prompts, B at a time (a wave of B starts when the
previous one has finished). Decode tokens/s = tokens sampled in steps that only decode (no
prefill chunk scheduled) / the wall time of those steps, proposers' time included; prefill steps
are left out of both. One engine (prefix caching on, warmed by one unmeasured run of every
workload, with the EAGLE-3 head attached when one is kept) serves all runs, so the runs differ
only by the proposer; proposers are built fresh
for every run (the suffix proposer learns only from the run's own earlier requests), except the
draft model's and the EAGLE-3 head's models, loaded once, whose own prefix caches persist across
runs as in a server, as the target's does (`--fresh-eagle3`: a new head, with an empty cache, for
every run: it then finds no rows for the prompts the target reads from its cache). Runs of
one (workload, batch) cell alternate between the proposers, `--reps` times; tokens/s are the
medians of the runs, a proposer's speed-up the median of its per-repetition ratios against the
none run of the same repetition (the runs beside it in time). One torch thread.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from tandem.config import CacheConfig, EngineConfig, ModelConfig, SchedulerConfig, SpeculativeConfig
from tandem.engine.engine import Engine
from tandem.spec.adaptive import AdaptiveDraftLength
from tandem.spec.factory import make_proposer
from tandem.spec.gate import SpeculationGate
from tandem.spec.suffix import SuffixProposer
from tandem.spec.suffix_draft import SuffixWithDraftModel
from tandem.spec.proposer import AdaptiveProposer
from tandem.spec.target import SpecTarget
from tandem.types import EngineRequest, SamplingParams

PROPOSERS = ("none", "ngram", "suffix", "draft_model", "suffix_draft", "eagle3")


def tool_call_prompts(n: int) -> list[str]:
    from tandem_demo.agent_transcripts import tool_call_turns
    from tandem_demo.chat_template import compile_template, render
    from tandem_demo.corpus import CorpusConfig, build_transcripts, split_chapters
    from tandem_demo.kjv import parse_chapters, read_bible_text

    cfg = CorpusConfig()
    train, _ = split_chapters(parse_chapters(read_bible_text()), cfg)
    _, held = build_transcripts(cfg, tuple(v for c in train for v in c.verses))
    template = compile_template()
    out = []
    for tr in held:
        for i in tool_call_turns(tr):
            out.append(render(template, tr["messages"][:i], tr["tools"], add_generation_prompt=True))
            if len(out) == n:
                return out
    return out


def prose_prompts(n: int) -> list[str]:
    from tandem_demo.corpus import CorpusConfig, split_chapters
    from tandem_demo.kjv import parse_chapters, read_bible_text

    _, held = split_chapters(parse_chapters(read_bible_text()), CorpusConfig())
    return ["\n".join(c.text().splitlines()[:3]) + "\n" for c in held[:n]]


def run_wave(engine: Engine, prompts: list[list[int]], max_tokens: int, tag: str) -> tuple[dict, float, float, int]:
    """Serve one wave; returns ({index: tokens}, decode-only seconds (wall, process CPU),
    decode-only tokens)."""
    for i, ids in enumerate(prompts):
        engine.add_request(EngineRequest(f"{tag}-{i}", ids, SamplingParams(max_tokens=max_tokens, temperature=0.0)))
    out: dict[int, list[int]] = {i: [] for i in range(len(prompts))}
    decode_s, decode_cpu_s, decode_tokens = 0.0, 0.0, 0
    while engine.requests:
        sched = engine.scheduler
        decode_only = not sched.waiting and all(r.num_computed_tokens >= r.num_tokens - 1 for r in sched.running)
        start, start_cpu = time.perf_counter(), time.process_time()
        deltas = engine.step()
        spent, spent_cpu = time.perf_counter() - start, time.process_time() - start_cpu
        n = 0
        for d in deltas:
            out[int(d.request_id.rsplit("-", 1)[1])] += d.new_token_ids
            n += len(d.new_token_ids)
        if decode_only:
            decode_s += spent
            decode_cpu_s += spent_cpu
            decode_tokens += n
    return out, decode_s, decode_cpu_s, decode_tokens


def proposer_for(name: str, engine: Engine, args, draft_method, gate: SpeculationGate,
                 eagle3_method=None) -> AdaptiveProposer | None:
    """A fresh proposer (no drafting state from earlier runs) around the workload's gate."""
    if name == "none":
        return None
    k = getattr(args, f"k_{name}")
    if name == "draft_model":   # the loaded draft is reused; its state is per request and freed
        return AdaptiveProposer(draft_method, k, AdaptiveDraftLength(k, 64), gate)
    if name == "eagle3" and eagle3_method is not None:   # the kept head, capturing again
        eagle3_method.attach()
        return AdaptiveProposer(eagle3_method, k, AdaptiveDraftLength(k, 64), gate)
    if name == "suffix_draft":  # {"method": "suffix", "model": DRAFT}: the same draft behind suffix
        method = SuffixWithDraftModel(SuffixProposer(k), draft_method)
        return AdaptiveProposer(method, k, AdaptiveDraftLength(k, 64, shorten=False), gate)
    cfg = SpeculativeConfig(name, num_speculative_tokens=k, prompt_lookup_min=args.prompt_lookup_min,
                            model=args.eagle3 if name == "eagle3" else None)
    proposer = make_proposer(cfg, SpecTarget.of_engine(engine))   # eagle3: taps the target's states
    proposer.gate = gate
    if name == "eagle3" and args.eagle3_catchup_window is not None:
        proposer.method.reconfigure(dataclasses.replace(proposer.method.cfg,
                                                        catchup_window=args.eagle3_catchup_window))
    return proposer


def run_cell(engine, prompts, batch, max_tokens, proposer, tag) -> dict:
    engine.proposer = proposer
    s0 = engine.stats()
    outputs: dict[int, list[int]] = {}
    decode_s = decode_cpu_s = decode_tokens = 0
    for start in range(0, len(prompts), batch):
        wave, secs, cpu, toks = run_wave(engine, prompts[start:start + batch], max_tokens, f"{tag}-{start}")
        outputs.update({start + i: t for i, t in wave.items()})
        decode_s += secs
        decode_cpu_s += cpu
        decode_tokens += toks
    s1 = engine.stats()
    if proposer is not None and hasattr(proposer.method, "close"):
        proposer.method.close()   # eagle3: the target stops capturing hidden states for the next runs
    drafted = s1.spec_num_draft_tokens - s0.spec_num_draft_tokens
    accepted = s1.spec_num_accepted_tokens - s0.spec_num_accepted_tokens
    drafts = s1.spec_num_drafts - s0.spec_num_drafts
    return {"outputs": outputs, "decode_s": decode_s, "decode_tokens": decode_tokens,
            "tok_s": decode_tokens / decode_s if decode_s else 0.0,
            "tok_cpu_s": decode_tokens / decode_cpu_s if decode_cpu_s else 0.0,
            "draft_tokens": drafted, "accepted_tokens": accepted,
            "acceptance": accepted / drafted if drafted else None,
            "mean_accepted_per_draft": accepted / drafts if drafts else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="models/tandem-demo-target")
    p.add_argument("--draft", default="models/tandem-demo-draft")
    p.add_argument("--requests", type=int, default=32, help="prompts per workload")
    p.add_argument("--batches", default="1,8,32")
    p.add_argument("--workloads", default="toolcall,prose")
    p.add_argument("--proposers", default=",".join(PROPOSERS))
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--k-ngram", type=int, default=8)
    p.add_argument("--k-suffix", type=int, default=16)
    p.add_argument("--k-draft-model", dest="k_draft_model", type=int, default=6)
    p.add_argument("--eagle3", default="models/tandem-demo-eagle3", help="the EAGLE-3 head's directory")
    p.add_argument("--k-eagle3", dest="k_eagle3", type=int, default=5)
    p.add_argument("--eagle3-catchup-window", type=int, default=None,
                   help="Eagle3ProposerConfig.catchup_window (default: the proposer's)")
    p.add_argument("--k-suffix-draft", dest="k_suffix_draft", type=int, default=16,
                   help="suffix drafts; the draft model behind them drafts at most --k-draft-model")
    p.add_argument("--prompt-lookup-min", type=int, default=2)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--no-prefix-caching", action="store_true",
                   help="every prompt computed whole (an EAGLE-3 head gets no target states for a "
                        "prompt read from the prefix cache; decode-only tokens/s leave prefills out anyway)")
    p.add_argument("--fresh-eagle3", action="store_true",
                   help="a new EAGLE-3 head (empty cache) for every run instead of one kept across runs")
    p.add_argument("--out", default="spec_decode.json")
    args = p.parse_args()
    torch.set_num_threads(1)
    # the code under test is what this process imported now
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "tandem", "benchmarks/spec_decode.py"],
                           capture_output=True, text=True).stdout.strip()
    start_load = os.getloadavg()
    batches = [int(b) for b in args.batches.split(",")]
    names = args.proposers.split(",")
    engine = Engine.from_config(EngineConfig(
        model=ModelConfig(path=args.target, dtype=args.dtype, show_progress=False),
        cache=CacheConfig(block_size=16, enable_prefix_caching=not args.no_prefix_caching), scheduler=SchedulerConfig(max_num_batched_tokens=2048),
        num_threads=1))
    engine.loaded.wait_packed()
    draft_method = None
    if "draft_model" in names or "suffix_draft" in names:
        cfg = SpeculativeConfig("draft_model", model=args.draft, num_speculative_tokens=args.k_draft_model)
        draft_method = make_proposer(cfg, SpecTarget.of_engine(engine)).method
        draft_method.loaded.wait_packed()
    eagle3_method = None
    if "eagle3" in names and not args.fresh_eagle3:
        cfg = SpeculativeConfig("eagle3", model=args.eagle3, num_speculative_tokens=args.k_eagle3)
        eagle3_method = make_proposer(cfg, SpecTarget.of_engine(engine)).method
        if args.eagle3_catchup_window is not None:
            eagle3_method.reconfigure(dataclasses.replace(eagle3_method.cfg, catchup_window=args.eagle3_catchup_window))
        eagle3_method.close()   # captures only while its runs are on
    tok = engine.tokenizer
    texts = {"toolcall": tool_call_prompts, "prose": prose_prompts}
    workloads = {w: [tok.encode(t, add_special_tokens=False) for t in texts[w](args.requests)]
                 for w in args.workloads.split(",")}
    results: list[dict] = []
    for wname, prompts in workloads.items():
        # the warm-up fills the target's prefix cache, and a kept EAGLE-3 head's with it (a server's
        # head has computed the rows of every prompt its target has cached)
        warm = proposer_for("eagle3", engine, args, draft_method, SpeculationGate(), eagle3_method) \
            if eagle3_method is not None else None
        run_cell(engine, prompts, max(batches), args.max_tokens, warm, f"warm-{wname}")
        # one gate per proposer and workload: what it measures persists, as in a running server
        gates = {n: SpeculationGate() for n in names}
        for batch in batches:
            runs: dict[str, list[dict]] = {n: [] for n in names}
            for rep in range(args.reps):
                for n in (names if rep % 2 == 0 else names[::-1]):
                    r = run_cell(engine, prompts, batch, args.max_tokens,
                                 proposer_for(n, engine, args, draft_method, gates[n], eagle3_method),
                                 f"{wname}-{batch}-{n}-{rep}")
                    runs[n].append(r)
                    print(f"{wname} b{batch} {n} rep{rep}: {r['tok_cpu_s']:.1f} tok/CPU-s, "
                          f"{r['tok_s']:.1f} tok/s", file=sys.stderr)
            base = runs["none"][0]["outputs"] if "none" in runs else None
            for n, rs in runs.items():
                # each repetition's ratio against the none run of the same repetition (adjacent in
                # time, in alternating order), so that the machine's slow drifts cancel
                ratios = [r["tok_cpu_s"] / b["tok_cpu_s"] for r, b in zip(rs, runs["none"])
                          if b["tok_cpu_s"]] if "none" in runs else []
                identical = base is None or all(r["outputs"] == base for r in rs)
                if not identical:
                    print(f"OUTPUT DIFFERS: {wname} b{batch} {n}", file=sys.stderr)
                results.append({
                    "workload": wname, "batch": batch, "proposer": n, "identical": identical,
                    "cpu_tok_s": statistics.median(r["tok_cpu_s"] for r in rs),
                    "wall_tok_s": statistics.median(r["tok_s"] for r in rs),
                    "cpu_tok_s_runs": [round(r["tok_cpu_s"], 2) for r in rs],
                    "wall_tok_s_runs": [round(r["tok_s"], 2) for r in rs],
                    "ratio": statistics.median(ratios) if ratios else None,
                    "ratio_runs": [round(x, 3) for x in ratios],
                    "output_tokens": sum(len(t) for t in rs[0]["outputs"].values()),
                    **{key: rs[0][key] for key in ("draft_tokens", "accepted_tokens", "acceptance",
                                                   "mean_accepted_per_draft")}})
    meta = {"date": datetime.date.today().isoformat(), "commit": commit, "uncommitted_in_tandem": dirty,
            "started_loadavg": start_load,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores", "loadavg_end": os.getloadavg(),
            "args": vars(args)}
    Path(args.out).write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    print(markdown(results, names))


def markdown(results: list[dict], names: list[str]) -> str:
    """Decode tokens per CPU-second (wall tokens/s in parentheses), speed-up over none (the median
    of the repetitions' ratios against none's run in the same repetition), acceptance."""
    others = [n for n in names if n != "none"]
    lines = ["| workload | batch | none | " + " | ".join(others) + " |",
             "|---|---:|---:|" + "---:|" * len(others)]
    cells = sorted({(r["workload"], r["batch"]) for r in results}, key=lambda c: (c[0] != "toolcall", c[1]))
    for wname, batch in cells:
        row = {r["proposer"]: r for r in results if (r["workload"], r["batch"]) == (wname, batch)}
        none = row["none"]
        out = [f"{none['cpu_tok_s']:.0f} ({none['wall_tok_s']:.0f})"]
        for n in others:
            r = row[n]
            acc = "" if r["acceptance"] is None else f", acc {r['acceptance']:.2f}"
            out.append(f"{r['cpu_tok_s']:.0f} ({r['wall_tok_s']:.0f}) x{r['ratio']:.2f}{acc}"
                       + ("" if r["identical"] else " DIFFERS"))
        lines.append(f"| {wname} | {batch} | " + " | ".join(out) + " |")
    return "\n".join(lines)

if __name__ == "__main__":
    main()
