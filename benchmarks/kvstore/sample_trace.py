"""A scaled-down Mooncake trace that keeps multi-turn reuse: whole conversations, sampled.

    .venv/bin/python benchmarks/kvstore/sample_trace.py ../shared/traces/mooncake_synthetic_trace.jsonl \
        OUT.jsonl [--conversations 25] [--min-turns 3] [--seed 0]

Taking the first N lines of a trace keeps its arrival pattern but loses most reuse (a
conversation's turns lie minutes apart). Here a conversation is the requests sharing their first
two hash ids (the synthetic trace resends a conversation with its next turn appended); the script
samples conversations with at least `--min-turns` requests and keeps every request of them, in
trace order with their timestamps (replay with `--time-scale` to compress time). Prints the
sample's size and its ideal hit ratio at 16 tokens per hash id.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import defaultdict

from tandem.bench.trace import TraceConfig, ideal_cached_tokens, read_trace, scaled_input_length


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--conversations", type=int, default=25)
    ap.add_argument("--min-turns", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-input-tokens", type=int, default=1024)
    args = ap.parse_args()
    lines = [json.loads(line) for line in open(args.trace) if line.strip()]
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, rec in enumerate(lines):
        groups[tuple(rec["hash_ids"][:2])].append(i)
    multi = sorted(k for k, v in groups.items() if len(v) >= args.min_turns)
    chosen = random.Random(args.seed).sample(multi, min(args.conversations, len(multi)))
    keep = sorted(i for k in chosen for i in groups[k])
    t0 = lines[keep[0]]["timestamp"]
    with open(args.out, "w") as f:
        for i in keep:
            f.write(json.dumps({**lines[i], "timestamp": lines[i]["timestamp"] - t0}) + "\n")
    recs = read_trace(args.out)
    cfg = TraceConfig(tokens_per_block=16, max_input_tokens=args.max_input_tokens)
    total = sum(scaled_input_length(r, cfg) for r in recs)
    ideal = sum(ideal_cached_tokens(recs, cfg))
    print(f"{len(recs)} requests from {len(chosen)} conversations over {recs[-1].timestamp_ms / 1000:.0f} s; "
          f"{total} prompt tokens at 16 per hash id, ideal hit ratio {ideal / total:.1%}")


if __name__ == "__main__":
    main()
