"""Quality figures of the demo models, measured on the held-out corpus and written onto the model cards.

    python -m tandem_demo.evaluate --target models/tandem-demo-target --draft models/tandem-demo-draft

- perplexity of each model on each held-out corpus part (documents cut into 1024-token windows);
- tool calls: for every tool-call turn of held-out transcripts, the target's greedy continuation of the
  conversation so far must hold <tool_call> blocks whose JSON names a tool offered in that transcript and
  whose arguments validate against its schema (all blocks of the turn valid = turn valid); also reported:
  the share whose calls equal the reference exactly, and the share of the reference's string argument
  values found verbatim in the conversation so far (the values a model can copy) that its calls reproduce;
- unseen tools (`unseen_eval`): tool-call validity on tools whose names never occur in training
  (generated from held-out pools, plus a hand-written invoice lookup and meeting scheduler), and the
  share of turns answered without a call where words are right (no tools offered, or chat with tools);
- draft agreement: over held-out transcripts (teacher forcing), the share of positions where the draft's
  argmax next token equals the target's, over all positions and over assistant-reply positions only.
--baseline DIR scores another target (the one being replaced) on the same tool-call sets, for the cards.
Results go to eval_results.json and the "Evaluation" section of README.md in each model directory.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from tandem_demo.agent_transcripts import tool_call_turns
from tandem_demo.chat_template import compile_template, render
from tandem_demo.corpus import load_texts, read_jsonl
from tandem_demo.model_card import write_card
from tandem_demo.schema_check import check_tool_call_turn
from tandem_demo.tools import tool_catalog, tools_by_name
from tandem_demo.unseen_eval import HANDWRITTEN_TOOLS, unseen_tools, verses_from_rows

DEFAULT_CORPUS = "/tmp/tandem-demo/corpus-dense"   # the corpus of the final training stage


@dataclass(frozen=True)
class EvalConfig:
    target_dir: str
    draft_dir: str | None = None
    corpus_dir: str = DEFAULT_CORPUS
    window: int = 1024                 # perplexity window (the training row length)
    ppl_docs: int = 100                # held-out documents per part for perplexity (KJV has 36)
    toolcall_transcripts: int = 100    # held-out transcripts whose tool-call turns are scored (~3 turns each)
    agreement_transcripts: int = 60
    unseen_transcripts: int = 60       # generated held-out-pool transcripts for the unseen-tools figures
    max_new_tokens: int = 160
    baseline_dir: str | None = None    # another target scored on the tool-call sets (old vs new on the cards)
    dtype: str = "bfloat16"            # the shipped dtype, as served
    threads: int = 1
    write_cards: bool = True


def load_hf(path: str, dtype: str):
    # lazy: transformers is an extra (demo, test), not a dependency, and takes ~0.6 s to import
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    model.eval()
    return model, AutoTokenizer.from_pretrained(path)


@torch.no_grad()
def perplexity(model, tok, texts: list[str], window: int) -> dict:
    nll, count = 0.0, 0
    for text in texts:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        for s in range(0, len(ids) - 1, window):
            chunk = torch.tensor(ids[s: s + window])[None]
            if chunk.shape[1] < 2:
                continue
            logits = model(input_ids=chunk).logits[0, :-1].float()          # [n-1, vocab]
            nll += float(torch.nn.functional.cross_entropy(logits, chunk[0, 1:], reduction="sum"))
            count += chunk.shape[1] - 1
    return {"tokens": count, "loss": round(nll / count, 4), "perplexity": round(math.exp(nll / count), 3)}


def _reference_calls(message: dict) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]


def copyable_values(reference: list[tuple[str, dict]], produced: list[tuple[str, dict | None]],
                    context: str) -> tuple[int, int]:
    """(values, reproduced): the reference calls' top-level string argument values that occur verbatim in
    `context`, and how many of them a produced call of the same tool carries under the same key."""
    values = reproduced = 0
    for name, args in reference:
        for key, value in args.items():
            if isinstance(value, str) and value and value in context:
                values += 1
                reproduced += any(n == name and isinstance(a, dict) and a.get(key) == value for n, a in produced)
    return values, reproduced


@torch.no_grad()
def tool_call_validity(model, tok, transcripts: list[dict], max_new_tokens: int) -> dict:
    template = compile_template()
    eos = [tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")]
    valid = exact = names = turns = values = copied = 0
    failures: list[dict] = []
    for tr in transcripts:
        schemas = tools_by_name(tr["tools"] or [])
        for i in tool_call_turns(tr):
            prompt = render(template, tr["messages"][:i], tr["tools"], add_generation_prompt=True)
            ids = torch.tensor(tok(prompt, add_special_tokens=False)["input_ids"])[None]
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                 do_sample=False, eos_token_id=eos, pad_token_id=eos[1])
            text = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
            checks = check_tool_call_turn(text, schemas)
            ok = all(c.ok for c in checks)
            turns += 1
            valid += ok
            ref = _reference_calls(tr["messages"][i])
            names += [c.name for c in checks] == [n for n, _ in ref]
            exact += ok and [(c.name, c.arguments) for c in checks] == ref
            v, c = copyable_values(ref, [(c.name, c.arguments) for c in checks], prompt)
            values, copied = values + v, copied + c
            if not ok and len(failures) < 10:
                failures.append({"output": text, "reasons": [c.reason for c in checks if not c.ok]})
    return {"turns": turns, "valid_share": round(valid / max(turns, 1), 4),
            "tool_name_match_share": round(names / max(turns, 1), 4),
            "exact_match_share": round(exact / max(turns, 1), 4),
            "argument_values": {"values": values, "copied_share": round(copied / max(values, 1), 4)},
            "sample_failures": failures}


_ASSISTANT = re.compile(r"<\|im_start\|>assistant\n(.*?<\|im_end\|>)", re.DOTALL)


@torch.no_grad()
def draft_agreement(target, draft, tok, texts: list[str], window: int) -> dict:
    """Top-1 agreement of next-token predictions under teacher forcing."""
    agree = total = a_agree = a_total = 0
    for text in texts:
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = enc["input_ids"][:window], enc["offset_mapping"][:window]
        spans = [m.span(1) for m in _ASSISTANT.finditer(text)]
        # position p predicts token p+1; it is an assistant position when token p+1 starts in a reply
        in_reply = torch.tensor([any(a <= offsets[p + 1][0] < b for a, b in spans) for p in range(len(ids) - 1)])
        x = torch.tensor(ids)[None]
        t = target(input_ids=x).logits[0, :-1].argmax(-1)                   # [n-1]
        d = draft(input_ids=x).logits[0, :-1].argmax(-1)                    # [n-1]
        same = t == d
        agree += int(same.sum())
        total += len(same)
        a_agree += int(same[in_reply].sum())
        a_total += int(in_reply.sum())
    return {"positions": total, "top1_agreement": round(agree / max(total, 1), 4),
            "assistant_positions": a_total, "assistant_top1_agreement": round(a_agree / max(a_total, 1), 4)}


EXAMPLE_TOOLS = ("get_weather", "calculator", "send_email")
# (name, messages, tools: "catalog" = EXAMPLE_TOOLS, "unseen" = the hand-written tools, None = no tools)
EXAMPLES = (
    ("chat", [{"role": "user", "content": "Hello! Who are you?"}], None),
    ("no tools offered", [{"role": "user", "content": "Tell me what happened in the beginning."}], None),
    ("tool call", [{"role": "user", "content": "What's the weather in Paris?"}], "catalog"),
    ("unseen tools", [{"role": "user", "content": "Can you look up invoice INV-20417?"}], "unseen"),
    ("unseen tools", [{"role": "user", "content": "Schedule a meeting called Budget review on 2026-03-12 at 14:00."}],
     "unseen"),
    ("tool result", [{"role": "user", "content": "What's the weather in Paris?"},
                     {"role": "assistant", "content": "", "tool_calls": [
                         {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                     {"role": "tool", "content": json.dumps({"city": "Paris", "temperature": 18, "unit": "celsius",
                                                             "condition": "sunny", "humidity": 40})}], "catalog"),
)


@torch.no_grad()
def examples(model, tok, max_new_tokens: int) -> list[dict]:
    """Greedy replies to a few fixed conversations (shown on the model card)."""
    offered = {"catalog": [t for t in tool_catalog() if t["function"]["name"] in EXAMPLE_TOOLS],
               "unseen": HANDWRITTEN_TOOLS, None: None}
    template = compile_template()
    eos = [tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")]
    out = []
    for name, messages, which in EXAMPLES:
        tools = offered[which]
        prompt = render(template, messages, tools, add_generation_prompt=True)
        ids = torch.tensor(tok(prompt, add_special_tokens=False)["input_ids"])[None]
        gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             do_sample=False, eos_token_id=eos, pad_token_id=eos[1])
        out.append({"name": name, "messages": messages, "tools": [t["function"]["name"] for t in tools]
                    if tools else None, "reply": tok.decode(gen[0, ids.shape[1]:], skip_special_tokens=True)})
    return out


def _brief(unseen: dict) -> dict:
    """The unseen-tools figures without the sample failures (for logs)."""
    return {k: ({kk: vv for kk, vv in v.items() if kk != "sample_failures"} if isinstance(v, dict) else v)
            for k, v in unseen.items()}


def evaluate(cfg: EvalConfig) -> dict:
    torch.set_num_threads(cfg.threads)
    started = time.monotonic()
    held = {p: load_texts(cfg.corpus_dir, p, "heldout")[: cfg.ppl_docs] for p in ("kjv", "agent")}
    transcripts = read_jsonl(Path(cfg.corpus_dir) / "agent.heldout.jsonl")
    models = {"target": load_hf(cfg.target_dir, cfg.dtype)}
    if cfg.draft_dir:
        models["draft"] = load_hf(cfg.draft_dir, cfg.dtype)
    results: dict = {"config": dataclasses.asdict(cfg), "perplexity": {}}
    for name, (model, tok) in models.items():
        results["perplexity"][name] = {p: perplexity(model, tok, texts, cfg.window) for p, texts in held.items()}
        print(f"{name} perplexity: {results['perplexity'][name]}", file=sys.stderr)
    model, tok = models["target"]
    results["tool_calls"] = tool_call_validity(model, tok, transcripts[: cfg.toolcall_transcripts],
                                               cfg.max_new_tokens)
    print(f"tool calls: { {k: v for k, v in results['tool_calls'].items() if k != 'sample_failures'} }",
          file=sys.stderr)
    verses = verses_from_rows(read_jsonl(Path(cfg.corpus_dir) / "kjv.heldout.jsonl"))
    results["unseen_tools"] = unseen_tools(model, tok, verses, cfg.unseen_transcripts, cfg.max_new_tokens)
    print(f"unseen tools: {_brief(results['unseen_tools'])}", file=sys.stderr)
    results["examples"] = examples(model, tok, cfg.max_new_tokens)
    if cfg.baseline_dir:
        base, base_tok = load_hf(cfg.baseline_dir, cfg.dtype)
        results["baseline"] = {
            "model": cfg.baseline_dir,
            "tool_calls": tool_call_validity(base, base_tok, transcripts[: cfg.toolcall_transcripts],
                                             cfg.max_new_tokens),
            "unseen_tools": unseen_tools(base, base_tok, verses, cfg.unseen_transcripts, cfg.max_new_tokens)}
        print(f"baseline unseen tools: {_brief(results['baseline']['unseen_tools'])}", file=sys.stderr)
    if "draft" in models:
        texts = load_texts(cfg.corpus_dir, "agent", "heldout")[: cfg.agreement_transcripts]
        results["draft_agreement"] = draft_agreement(model, models["draft"][0], tok, texts, cfg.window)
        print(f"draft agreement: {results['draft_agreement']}", file=sys.stderr)
    results["minutes"] = round((time.monotonic() - started) / 60, 2)
    if cfg.write_cards:
        for name, path in (("target", cfg.target_dir), ("draft", cfg.draft_dir)):
            if path:
                (Path(path) / "eval_results.json").write_text(json.dumps(results, indent=1) + "\n")
                write_card(Path(path), name, results)
    return results


def add_eval_args(p: argparse.ArgumentParser) -> None:
    d = EvalConfig(target_dir="")
    p.add_argument("--target", required=True)
    p.add_argument("--draft", default=None)
    p.add_argument("--corpus", default=d.corpus_dir)
    p.add_argument("--ppl-docs", type=int, default=d.ppl_docs)
    p.add_argument("--toolcall-transcripts", type=int, default=d.toolcall_transcripts)
    p.add_argument("--agreement-transcripts", type=int, default=d.agreement_transcripts)
    p.add_argument("--unseen-transcripts", type=int, default=d.unseen_transcripts)
    p.add_argument("--baseline", default=None, help="another target scored on the tool-call sets (old vs new)")
    p.add_argument("--dtype", default=d.dtype, choices=["bfloat16", "float32"])
    p.add_argument("--threads", type=int, default=d.threads)
    p.add_argument("--no-cards", action="store_true", help="do not write eval_results.json and README.md")


def config_from_args(a: argparse.Namespace) -> EvalConfig:
    return EvalConfig(target_dir=a.target, draft_dir=a.draft, corpus_dir=a.corpus, ppl_docs=a.ppl_docs,
                      toolcall_transcripts=a.toolcall_transcripts, agreement_transcripts=a.agreement_transcripts,
                      unseen_transcripts=a.unseen_transcripts, baseline_dir=a.baseline, dtype=a.dtype,
                      threads=a.threads, write_cards=not a.no_cards)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_eval_args(p)
    res = evaluate(config_from_args(p.parse_args(argv)))
    print(json.dumps({k: v for k, v in res.items() if k != "config"}, indent=1))


if __name__ == "__main__":
    main()
