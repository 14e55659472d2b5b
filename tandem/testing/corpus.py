"""A deterministic English-like corpus, generated procedurally (no downloads), to train test tokenizers."""

from __future__ import annotations

import json
import random

_SUBJECTS = ("the model", "a user", "the server", "our team", "the weather", "this function", "the agent",
             "every request", "the cache", "a small dog", "the city", "my friend", "the tool", "the answer")
_VERBS = ("returns", "reads", "writes", "calls", "finds", "sends", "keeps", "makes", "sees", "needs",
          "likes", "checks", "builds", "stores", "opens")
_OBJECTS = ("the result", "a long list", "some tokens", "the weather in Paris", "a new file", "the block",
            "many numbers", "a short story", "the first page", "an error", "the time", "a cup of tea")
_ADVERBS = ("quickly", "today", "again", "carefully", "at noon", "in the morning", "twice", "later")
_NAMES = ("get_weather", "search", "add", "lookup_user", "send_email", "read_file")


def corpus_lines(num_lines: int = 3000, seed: int = 1234) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for i in range(num_lines):
        kind = i % 5
        if kind == 3:
            args = {"city": rng.choice(("Paris", "Tokyo", "Lima")), "days": rng.randint(1, 9)}
            lines.append(json.dumps({"name": rng.choice(_NAMES), "arguments": args}))
        elif kind == 4:
            lines.append(f"Question {rng.randint(0, 999)}: what is {rng.randint(0, 99)} + {rng.randint(0, 99)}?")
        else:
            s = f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_ADVERBS)}."
            lines.append(s[0].upper() + s[1:])
    return lines
