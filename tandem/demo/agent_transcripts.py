"""Generated agent transcripts: a system prompt, a subset of the tool catalog, and one to three
exchanges (user request, tool calls, tool results, final answer) in OpenAI message form.

A transcript is a plain dict {"tools": [...] | None, "messages": [...]}, rendered to text with
`tandem.demo.chat_template`. Generation is a pure function of (seed, split, index).
"""

from __future__ import annotations

import json
import random

from tandem.demo import pools as P
from tandem.demo.kjv import Verse
from tandem.demo.scenarios import TOOL_SCENARIOS, Exchange
from tandem.demo.tools import tool_catalog

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


def _pick_scenarios(rng: random.Random, k: int):
    fns, weights = zip(*TOOL_SCENARIOS)
    return rng.choices(fns, weights=weights, k=k)


def make_transcript(seed: int, split: str, index: int, verses: tuple[Verse, ...]) -> dict:
    rng = transcript_rng(seed, split, index)
    if rng.random() < 0.05:   # plain chat, no tools offered
        exchanges = [rng.choice([_direct(rng, None), _recite(rng, verses)])]
        system = rng.choice(["You are a helpful assistant.", "You are the Tandem demo assistant."])
        msgs = [{"role": "system", "content": system}] + [m for ex in exchanges for m in _messages(ex)]
        return {"tools": None, "messages": msgs}

    n_tool = rng.choices([1, 2, 3], weights=[0.65, 0.28, 0.07])[0]
    tool_ex = [fn(rng, verses) for fn in _pick_scenarios(rng, n_tool)]
    needed = sorted({n for ex in tool_ex for n in ex.tool_names})
    catalog = tool_catalog()
    others = [t for t in catalog if t["function"]["name"] not in needed]
    n_total = max(len(needed), rng.randint(2, 5))
    tools = [t for t in catalog if t["function"]["name"] in needed] + rng.sample(others, n_total - len(needed))
    rng.shuffle(tools)
    names = [t["function"]["name"] for t in tools]

    exchanges: list[Exchange] = list(tool_ex)
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
