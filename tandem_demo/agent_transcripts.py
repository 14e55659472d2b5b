"""Generated agent transcripts: a system prompt, a subset of the tool catalog, and one to three
exchanges (user request, tool calls, tool results, final answer) in OpenAI message form.

A transcript is a plain dict {"tools": [...] | None, "messages": [...]}, rendered to text with
`tandem_demo.chat_template`. Generation is a pure function of (seed, split, index).
"""

from __future__ import annotations

import json
import random

from tandem_demo import pools as P
from tandem_demo.kjv import Verse
from tandem_demo.scenarios import TOOL_SCENARIOS, Exchange
from tandem_demo.tools import tool_catalog

IDENTITY = "I am the Tandem demo assistant, a small language model that can call tools."


def transcript_rng(seed: int, split: str, index: int) -> random.Random:
    """Independent stream per transcript, so any one can be regenerated alone."""
    return random.Random(f"{seed}:{split}:{index}")


def _direct(rng: random.Random, tool_names: list[str] | None) -> Exchange:
    """An exchange the assistant answers without a tool."""
    kind = rng.choice(["greeting", "identity", "capabilities"] if tool_names else ["greeting", "identity"])
    if kind == "greeting":
        return Exchange(rng.choice(["Hi!", "Hello", "Hey there", "Good morning!", "Hello, are you there?"]), (),
                        rng.choice(["Hello! How can I help you today?", "Hi! What can I do for you?"]))
    if kind == "identity":
        return Exchange(rng.choice(["Who are you?", "What are you?", "Tell me about yourself."]), (), IDENTITY)
    return Exchange(rng.choice(["What can you do?", "Which tools do you have?", "What tools are available?"]), (),
                    "I can use these tools: " + ", ".join(tool_names) + ".")


def _thanks(rng: random.Random) -> Exchange:
    return Exchange(rng.choice(["Thanks!", "Thank you", "Great, thanks.", "Perfect, thank you!"]), (),
                    rng.choice(["You're welcome!", "Glad I could help.", "Happy to help!"]))


def _recite(rng: random.Random, verses: tuple[Verse, ...]) -> Exchange:
    v = rng.choice(verses)
    return Exchange(rng.choice([f"Recite {v.reference}.", f"What is written in {v.reference}?"]), (),
                    f"{v.reference}: {v.text}")


def _messages(ex: Exchange) -> list[dict]:
    out: list[dict] = [{"role": "user", "content": ex.user}]
    for step in ex.steps:
        out.append({"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": n, "arguments": a}} for n, a in step.calls]})
        out.extend({"role": "tool", "content": json.dumps(r)} for r in step.results)
    out.append({"role": "assistant", "content": ex.answer})
    return out


def _pick(rng: random.Random, scenarios) -> tuple:
    return rng.choices(scenarios, weights=[w for _, w, _ in scenarios])[0]


def _tools_for(rng: random.Random, needed: set[str], n_total: int) -> list[dict]:
    catalog = tool_catalog()
    others = [t for t in catalog if t["function"]["name"] not in needed]
    tools = [t for t in catalog if t["function"]["name"] in needed]
    tools += rng.sample(others, max(0, n_total - len(tools)))
    rng.shuffle(tools)
    return tools


def _sparse_tool_exchanges(rng: random.Random, verses) -> tuple[list[dict], list[Exchange]]:
    """1-3 independent requests; 2-5 tools offered (those needed plus random others)."""
    n = rng.choices([1, 2, 3], weights=[0.65, 0.28, 0.07])[0]
    picked = [_pick(rng, TOOL_SCENARIOS) for _ in range(n)]
    exchanges = [fn(rng, verses) for fn, _, _ in picked]
    needed = {name for ex in exchanges for name in ex.tool_names}
    return _tools_for(rng, needed, rng.randint(2, 5)), exchanges


def _dense_tool_exchanges(rng: random.Random, verses) -> tuple[list[dict], list[Exchange]]:
    """2-4 tools offered and 1-5 requests that use only those tools: more tool calls per token."""
    first = _pick(rng, TOOL_SCENARIOS)
    tools = _tools_for(rng, set(first[2]), rng.randint(2, 4))
    offered = {t["function"]["name"] for t in tools}
    usable = [s for s in TOOL_SCENARIOS if set(s[2]) <= offered]
    n = rng.choices([1, 2, 3, 4, 5], weights=[0.15, 0.2, 0.25, 0.2, 0.2])[0]
    picked = [first] + [_pick(rng, usable) for _ in range(n - 1)]
    return tools, [fn(rng, verses) for fn, _, _ in picked]


def _drill_tool_exchanges(rng: random.Random, verses) -> tuple[list[dict], list[Exchange]]:
    """1-3 tools offered and 1-2 requests that use them: short transcripts, so that copying argument
    values from the request (which the dense layout spreads over long tool listings) is seen often."""
    first = _pick(rng, TOOL_SCENARIOS)
    tools = _tools_for(rng, set(first[2]), rng.randint(1, 3))
    offered = {t["function"]["name"] for t in tools}
    usable = [s for s in TOOL_SCENARIOS if set(s[2]) <= offered]
    picked = [first] + [_pick(rng, usable) for _ in range(rng.choices([0, 1], weights=[0.6, 0.4])[0])]
    return tools, [fn(rng, verses) for fn, _, _ in picked]


LAYOUTS = {"sparse": _sparse_tool_exchanges, "dense": _dense_tool_exchanges, "drill": _drill_tool_exchanges}


def make_transcript(seed: int, split: str, index: int, verses: tuple[Verse, ...], layout: str = "dense") -> dict:
    rng = transcript_rng(seed, split, index)
    if rng.random() < 0.05:   # plain chat, no tools offered
        exchanges = [rng.choice([_direct(rng, None), _recite(rng, verses)])]
        system = rng.choice(["You are a helpful assistant.", "You are the Tandem demo assistant."])
        msgs = [{"role": "system", "content": system}] + [m for ex in exchanges for m in _messages(ex)]
        return {"tools": None, "messages": msgs}

    tools, exchanges = LAYOUTS[layout](rng, verses)
    names = [t["function"]["name"] for t in tools]
    if rng.random() < 0.12:
        exchanges.insert(0, _direct(rng, names))
    if rng.random() < 0.15:
        exchanges.append(_thanks(rng))
    msgs = [{"role": "system", "content": rng.choice(P.SYSTEM_PROMPTS)}]
    msgs += [m for ex in exchanges for m in _messages(ex)]
    return {"tools": tools, "messages": msgs}


def tool_call_turns(transcript: dict) -> list[int]:
    """Indices of assistant messages that carry tool calls (the turns the evaluation scores)."""
    return [i for i, m in enumerate(transcript["messages"]) if m["role"] == "assistant" and m.get("tool_calls")]
