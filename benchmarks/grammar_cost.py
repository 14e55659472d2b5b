"""What grammar-constrained decoding costs (issue 18, item 7), on one engine in one process.

1. Decode step time at batch B (1 and 16) without a grammar and with each grammar kind a request
   can bring, alternating the settings round after round (median of the rounds):
   - tools-auto: tool_choice "auto" over the demo catalog's tools (free text; calls held to the
     tools once opened): the constraint every tool request pays by default;
   - json-schema: JSON arguments under a schema (an array of call-like objects, so that the
     requests stay inside JSON for the whole window): masks change at every step;
   - guard: the tool-call guard every request without tools carries (free text without the
     format's call opening, tandem/turn/tool_guard.py).
   Every request decodes the same agentic prompt; EOS is biased away (logit_bias -100) so that all
   B requests decode for the whole window in every setting. Time per step = the window's wall
   time / its steps, after the prompts were prefilled; also the process's CPU time per step (both
   threads: the masks are filled on a helper thread while the forward runs), which a busy shared
   machine disturbs less than wall time.
2. One tool-call turn (batch 1, greedy, the prompt's prefix cached as an agent's next turn finds
   it): prompt in, call out, until EOS; no grammar, tool_choice auto, and tool_choice required.
   Also the first compile of the tools' grammar (once per tool set, then cached).
   And the server's own work per turn: planning the request (tools read, the grammar's JSON built)
   and parsing the call out of the text (tandem.parsers), medians of 200.
3. The mask work alone, replayed on tokens each grammar produced in (1): per request and step,
   filling its bitmask row and accepting its token (µs), and applying the masks to [B, V] logits.

  .venv/bin/python benchmarks/grammar_cost.py [--model models/tandem-demo-target] [--threads 1]
      [--batches 1,16] [--steps 32] [--rounds 5] [--turns 7]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch

from tandem.config import CacheConfig, EngineConfig, ModelConfig
from tandem.engine.engine import Engine
from tandem.tokenization.chat_prompt import render_chat
from tandem.turn.chat_plan import plan_chat
from tandem.turn.parser_setup import ParserSetup
from tandem.turn.tool_grammar import tool_call_grammar
from tandem.turn.tool_guard import call_openings, no_calls_grammar
from tandem.turn.tool_request import ToolRequest
from tandem.types import EngineRequest, GrammarSpec, SamplingParams
from tandem_demo.tools import tool_catalog

TOOL_NAMES = ("get_weather", "calculator", "send_email", "search_web", "set_timer")
ASK = [{"role": "system", "content": "You are a helpful assistant."},
       {"role": "user", "content": "What's the weather in Paris? Then email it to ana@example.com."}]


def settings(tools: list[dict], setup: ParserSetup) -> dict[str, GrammarSpec | None]:
    args = tools[0]["function"]["parameters"]
    calls = {"type": "array", "minItems": 64, "items": {
        "type": "object", "properties": {"name": {"enum": [t["function"]["name"] for t in tools]},
                                         "arguments": args}, "required": ["name", "arguments"]}}
    return {"none": None,
            "tools-auto": tool_call_grammar(setup.tool_call_parser, tools, "auto", None, True,
                                            chat_template=setup.chat_template),
            "json-schema": GrammarSpec("json_schema", json.dumps(calls)),
            "guard": no_calls_grammar(call_openings(setup.tool_call_parser, setup.chat_template))}


def decode_step_ms(engine: Engine, prompt: list[int], batch: int, grammar: GrammarSpec | None,
                   steps: int, tag: str, tokens: list[int] | None = None) -> tuple[float, float]:
    """(wall ms, process CPU ms) of one decode step with `batch` requests decoding under `grammar`;
    `tokens` gets the first request's output tokens."""
    bias = tuple((t, -100.0) for t in engine.loaded.eos_token_ids)
    for i in range(batch):
        engine.add_request(EngineRequest(f"{tag}-{i}", list(prompt), SamplingParams(
            max_tokens=steps + 8, temperature=0.0, grammar=grammar, logit_bias=bias)))
    produced = {f"{tag}-{i}": 0 for i in range(batch)}
    while min(produced.values()) < 2:   # prefill (cached after the first round) and a first decode
        for d in engine.step():
            produced[d.request_id] += len(d.new_token_ids)
    start, cpu, n = time.perf_counter(), time.process_time(), 0
    while n < steps and engine.has_work():
        for d in engine.step():
            if tokens is not None and d.request_id == f"{tag}-0":
                tokens += d.new_token_ids
        n += 1
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    for i in range(batch):
        engine.abort(f"{tag}-{i}")
    while engine.has_work():
        engine.step()
    return elapsed / n * 1e3, cpu / n * 1e3


def mask_us(engine: Engine, spec: GrammarSpec, tokens: list[int], batch: int, reps: int = 5) -> tuple[float, float]:
    """(µs to fill one request's row and accept its token, µs to apply a step's masks to [batch, V]
    logits), medians, replaying `tokens` (a valid output of `spec`)."""
    from tandem.grammar.masks import GrammarMasks, allocate, apply

    vocab = engine.grammars.vocab_size
    bitmask = allocate(batch, vocab)
    logits = torch.randn(batch, vocab)
    fills, applies = [], []
    for _ in range(reps):
        grammars = [engine.grammars.matcher(spec) for _ in range(batch)]
        t = time.perf_counter()
        for token in tokens:
            for row, g in enumerate(grammars):
                g.mask_rows(bitmask, row, ())
                g.accept(token)
        fills.append((time.perf_counter() - t) / (len(tokens) * batch) * 1e6)
        masks = GrammarMasks(bitmask, list(range(batch)))
        t = time.perf_counter()
        for _ in range(len(tokens)):
            apply(logits, masks)
        applies.append((time.perf_counter() - t) / len(tokens) * 1e6)
    return statistics.median(fills), statistics.median(applies)


def turn_ms(engine: Engine, prompt: list[int], grammar: GrammarSpec | None, tag: str
            ) -> tuple[float, int, str, float]:
    """(wall ms, output tokens, text, process CPU ms) of one greedy turn until EOS."""
    engine.add_request(EngineRequest(tag, list(prompt), SamplingParams(max_tokens=96, temperature=0.0,
                                                                        grammar=grammar)))
    start, cpu, text, n = time.perf_counter(), time.process_time(), "", 0
    while engine.has_work():
        for d in engine.step():
            text += d.new_text
            n += len(d.new_token_ids)
    return (time.perf_counter() - start) * 1e3, n, text, (time.process_time() - cpu) * 1e3


def _median_us(fn, n: int = 200) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="models/tandem-demo-target")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batches", default="1,16")
    p.add_argument("--steps", type=int, default=32, help="decode steps timed per window")
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds per batch size")
    p.add_argument("--turns", type=int, default=7, help="tool-call turns per setting")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    engine = Engine.from_config(EngineConfig(ModelConfig(args.model, show_progress=False),
                                             cache=CacheConfig(num_blocks=2048), num_threads=args.threads))
    engine.loaded.wait_packed()
    tok = engine.tokenizer
    setup = ParserSetup.resolve("auto", None, tok)
    tools = [t for t in tool_catalog() if t["function"]["name"] in TOOL_NAMES]
    prompt = render_chat(tok, ASK, tools)
    cases = settings(tools, setup)
    engine.grammars.compile(GrammarSpec("json_object"))   # builds the compiler's vocabulary first
    t = time.perf_counter()
    engine.grammars.compile(cases["tools-auto"])
    compile_auto = (time.perf_counter() - t) * 1e3
    required = tool_call_grammar(setup.tool_call_parser, tools, "required", None, True,
                                 chat_template=setup.chat_template)
    t = time.perf_counter()
    engine.grammars.compile(required)
    compile_required = (time.perf_counter() - t) * 1e3
    engine.grammars.compile(cases["json-schema"])
    print(f"# {args.model}, {args.threads} thread(s), {platform.processor() or platform.machine()}, "
          f"prompt {len(prompt)} tokens, parser {setup.tool_call_parser}, tools {len(tools)}")
    print(f"first compile: tools-auto {compile_auto:.0f} ms, tools-required {compile_required:.0f} ms "
          f"(then cached)")

    outputs: dict[str, list[int]] = {k: [] for k in cases}
    for batch in (int(b) for b in args.batches.split(",")):
        times: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
        decode_step_ms(engine, prompt, batch, None, 4, "warm")
        for r in range(args.rounds):
            order = list(cases) if r % 2 == 0 else list(reversed(cases))
            for name in order:
                out = outputs[name] if not outputs[name] else None
                times[name].append(decode_step_ms(engine, prompt, batch, cases[name], args.steps,
                                                  f"b{batch}-{r}-{name}", out))
        base = statistics.median(t[0] for t in times["none"])
        cpu_base = statistics.median(t[1] for t in times["none"])
        print(f"\nbatch {batch}: decode step, median of {args.rounds} windows of {args.steps} steps")
        print("| setting | wall ms/step | vs none | CPU ms/step | vs none | wall runs |")
        print("|---|---:|---:|---:|---:|---|")
        for name, ts in times.items():
            m, c = statistics.median(t[0] for t in ts), statistics.median(t[1] for t in ts)
            print(f"| {name} | {m:.2f} | x{m / base:.2f} | {c:.2f} | x{c / cpu_base:.2f} | "
                  f"{' / '.join(f'{t[0]:.1f}' for t in ts)} |")

    print(f"\nmask work, replayed on {args.steps} tokens of each grammar's output (medians)")
    print("| setting | fill + accept, µs per request and step | apply to [1, V] µs | apply to [16, V] µs |")
    print("|---|---:|---:|---:|")
    for name, spec in cases.items():
        if spec is None:
            continue
        fill, apply1 = mask_us(engine, spec, outputs[name], 1)
        _, apply16 = mask_us(engine, spec, outputs[name], 16, reps=3)
        print(f"| {name} | {fill:.0f} | {apply1:.0f} | {apply16:.0f} |")

    turns = {"none": None, "tools-auto": cases["tools-auto"], "tools-required": required}
    results: dict[str, list[tuple[float, int, str, float]]] = {k: [] for k in turns}
    turn_ms(engine, prompt, None, "warm-turn")
    for r in range(args.turns):
        for name in (turns if r % 2 == 0 else list(reversed(turns))):
            results[name].append(turn_ms(engine, prompt, turns[name], f"t{r}-{name}"))
    print(f"\ntool-call turn (batch 1, greedy, prompt cached), median of {args.turns}")
    print("| setting | wall ms/turn | CPU ms/turn | output tokens | wall runs | output |")
    print("|---|---:|---:|---:|---|---|")
    for name, rs in results.items():
        ms, cpu = statistics.median(x[0] for x in rs), statistics.median(x[3] for x in rs)
        print(f"| {name} | {ms:.1f} | {cpu:.1f} | {rs[0][1]} | {' / '.join(f'{x[0]:.0f}' for x in rs)} "
              f"| {rs[0][2][:60]!r} |")
    plan = plan_chat(setup, ToolRequest(tools, "auto"), None, None, "")
    text = results["tools-auto"][0][2]
    plan_us = _median_us(lambda: plan_chat(setup, ToolRequest(tools, "auto"), None, None, ""))
    parse_us = _median_us(lambda: plan.output.parse(text, "chatcmpl-x"))
    print(f"server work per turn: plan (tools -> grammar JSON) {plan_us:.0f} µs, "
          f"output parse {parse_us:.0f} µs")
    engine.shutdown()


if __name__ == "__main__":
    main()
