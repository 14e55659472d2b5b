"""Tokenizing an agent's growing conversation, turn after turn: the piece cache of
`Tokenizer.encode_prompt` (what workers and the gateway use) against encoding the whole
rendered prompt every turn (the baseline), in one process, alternating per turn.

Each turn appends a tool result of --result-chars characters and a short assistant reply to a
conversation that starts with a system prompt and --tools tool definitions; both paths get the
same rendered text and must return the same ids (checked).

  taskset -c 0 python benchmarks/chat_tokenize.py [--model models/tandem-demo-target] [--turns 40]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from tandem.tokenization.tokenizer import Tokenizer
from tandem.turn.chat_request import normalize_messages

WORDS = ("the file src/main.py line error returned value function call test passed failed "
         "config path user request tool output json list item name status ok").split()


def text(rng: random.Random, chars: int) -> str:
    out, n = [], 0
    while n < chars:
        w = rng.choice(WORDS)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="models/tandem-demo-target")
    ap.add_argument("--turns", type=int, default=40)
    ap.add_argument("--result-chars", type=int, default=4000)
    ap.add_argument("--tools", type=int, default=20)
    a = ap.parse_args()
    rng = random.Random(0)
    tok = Tokenizer.from_dir(a.model)
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": text(rng, 300),
                                                "parameters": {"type": "object", "properties": {
                                                    "arg": {"type": "string", "description": text(rng, 80)}}}}}
             for i in range(a.tools)]
    messages = [{"role": "system", "content": text(rng, 3000)}, {"role": "user", "content": text(rng, 500)}]
    rows = []
    for turn in range(a.turns):
        messages += [{"role": "assistant", "content": text(rng, 200)},
                     {"role": "user", "content": "Tool result:\n" + text(rng, a.result_chars)}]
        rendered = tok.apply_chat_template(normalize_messages(messages), tools=tools)
        t0 = time.perf_counter()
        whole = tok.encode(rendered, add_special_tokens=False)
        t1 = time.perf_counter()
        cached = tok.encode_prompt(rendered)
        t2 = time.perf_counter()
        assert cached == whole, f"turn {turn}: ids differ"
        rows.append({"turn": turn, "tokens": len(whole), "whole_ms": (t1 - t0) * 1e3, "cached_ms": (t2 - t1) * 1e3})
    later = rows[1:]
    print(json.dumps({
        "model": a.model, "turns": a.turns, "piece_cache_enabled": tok._prompt_encoder.enabled,
        "last_turn_tokens": rows[-1]["tokens"],
        "first_turn_ms": {"whole": round(rows[0]["whole_ms"], 2), "cached": round(rows[0]["cached_ms"], 2)},
        "later_turns_median_ms": {"whole": round(statistics.median(r["whole_ms"] for r in later), 2),
                                  "cached": round(statistics.median(r["cached_ms"] for r in later), 2)},
        "last_turn_ms": {"whole": round(rows[-1]["whole_ms"], 2), "cached": round(rows[-1]["cached_ms"], 2)},
    }, indent=2))


if __name__ == "__main__":
    main()
