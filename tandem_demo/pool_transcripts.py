"""Transcripts over generated tools (`tool_pool`): the layout `pool` of `python -m tandem_demo build-corpus`.

Each transcript offers one to five freshly synthesised tools (or none) and holds one to four exchanges:
- a request whose words name a tool's verb and noun and carry every argument value it needs (argument
  names are spoken with spaces: "billing email"); the call copies name, keys and values; a tool result;
  a final answer that quotes the result. Sometimes two requests in one message (parallel calls);
- turns whose right answer is no call, although tools are offered: greetings, thanks, "what can you
  do", scripture questions, and requests that no offered tool serves;
- transcripts with no tools at all: prose answers (King James verses, chat), including requests that
  look like tool requests ("look up invoice 4411"), which get a plain refusal, never a call.
Split "train" draws tools from `vocab("train")`, split "heldout" from `vocab("heldout")`: held-out
transcripts use tool names never seen in training. Generation is a pure function of (seed, split, index).
"""

from __future__ import annotations

import json
import random

from tandem_demo import pools as P
from tandem_demo.kjv import Verse
from tandem_demo.scenarios import Exchange, Step
from tandem_demo.tool_pool import GenTool, Vocab, describe, draw_value, make_tool, vocab

IDENTITY = "I am the Tandem demo assistant, a small language model that can call tools."
STATUSES = ("ok", "done", "confirmed", "pending", "created", "updated", "found", "scheduled", "sent", "queued")


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def _mention(rng: random.Random, tool: GenTool, arg, value) -> str:
    """How a request states one argument: its spoken name (or the noun, for an id) and the value verbatim."""
    if arg.kind == "boolean":
        on = value is True
        return rng.choice([f"with {arg.spoken} {'on' if on else 'off'}", f"{arg.spoken}: {'yes' if on else 'no'}",
                           f"{arg.spoken} set to {'true' if on else 'false'}"])
    v = str(value)
    if arg.kind == "id" and rng.random() < 0.5:
        return rng.choice([f"{tool.noun} {v}", f"{tool.noun} number {v}", f"the {tool.noun} {v}"])
    return rng.choice([f"{arg.spoken} {v}", f"{arg.spoken}: {v}", f"with {arg.spoken} {v}",
                       f"{arg.spoken} set to {v}", f"where the {arg.spoken} is {v}", f"{arg.spoken} = {v}"])


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _args_for(rng: random.Random, tool: GenTool) -> dict:
    """Required arguments always, optional ones half the time; in schema order."""
    return {a.name: draw_value(rng, a, tool.noun) for a in tool.args
            if a.name in tool.required or rng.random() < 0.5}


def request_text(rng: random.Random, tool: GenTool, args: dict) -> str:
    by_name = {a.name: a for a in tool.args}
    verb = rng.choice(tool.verb_phrases)
    mentions = [_mention(rng, tool, by_name[k], v) for k, v in args.items()]
    rng.shuffle(mentions)
    m, n = _join(mentions), tool.noun
    return rng.choice([
        f"{_cap(verb)} the {n}, {m}.", f"Please {verb} a {n}: {m}.", f"Can you {verb} the {n} with {m}?",
        f"I need you to {verb} a {n}. Use {m}.", f"{verb} {n} {m}", f"Could you {verb} my {n}? {_cap(m)}.",
        f"{_cap(n)}: {verb} it, {m}.", f"Hi, {verb} the {n} for me ({m}).",
    ])


def _result(rng: random.Random, tool: GenTool, args: dict) -> dict:
    out = {"status": rng.choice(STATUSES)}
    for k in list(args)[: rng.randint(1, 2)]:
        out[k] = args[k]
    if rng.random() < 0.4:
        out[rng.choice(["total", "count", "items", "score"])] = rng.randint(1, 500)
    return out


def _answer(rng: random.Random, tool: GenTool, result: dict) -> str:
    facts = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in result.items() if k != "status")
    return rng.choice([f"Done: the {tool.noun} is {result['status']} ({facts}).",
                       f"The {tool.noun} request came back {result['status']}: {facts}.",
                       f"Status {result['status']}. Details: {facts}.",
                       f"Your {tool.noun} is {result['status']}. {_cap(facts)}."])


def call_exchange(rng: random.Random, tools: list[GenTool]) -> Exchange:
    """One request for each tool in `tools` (two tools: one message, parallel calls)."""
    asks, calls, results, answers = [], [], [], []
    for tool in tools:
        args = _args_for(rng, tool)
        asks.append(request_text(rng, tool, args))
        r = _result(rng, tool, args)
        calls.append((tool.name, args))
        results.append(r)
        answers.append(_answer(rng, tool, r))
    user = asks[0] if len(asks) == 1 else asks[0] + rng.choice([" Also: ", " And: ", " Then: "]) + asks[1]
    return Exchange(user, (Step(tuple(calls), tuple(results)),), " ".join(answers))


def _verse_exchange(rng: random.Random, verses: tuple[Verse, ...]) -> Exchange:
    v = rng.choice(verses)
    ask = rng.choice([f"Recite {v.reference}.", f"What is written in {v.reference}?", f"Tell me {v.reference}.",
                      f"What does {v.book} say in chapter {v.chapter}?", f"Tell me what happened in {v.book} {v.chapter}.",
                      f"Quote something from {v.book}.", "Tell me a verse from the Bible.", "Say something wise.",
                      f"What happened in {v.book}?", "Tell me a story from scripture."])
    return Exchange(ask, (), rng.choice([f"{v.reference}: {v.text}", f"It is written in {v.reference}: {v.text}",
                                         v.text]))


def _chat_exchange(rng: random.Random, tool_names: list[str]) -> Exchange:
    kinds = ["greeting", "identity", "thanks", "smalltalk"] + (["capabilities"] * 2 if tool_names else [])
    kind = rng.choice(kinds)
    if kind == "greeting":
        return Exchange(rng.choice(["Hi!", "Hello", "Hey there", "Good morning!", "Hello, are you there?",
                                    "Good evening.", "Hi, how are you?"]), (),
                        rng.choice(["Hello! How can I help you today?", "Hi! What can I do for you?",
                                    "I'm well, thank you. How can I help?"]))
    if kind == "identity":
        return Exchange(rng.choice(["Who are you?", "What are you?", "Tell me about yourself.",
                                    "Are you a person?"]), (), IDENTITY)
    if kind == "thanks":
        return Exchange(rng.choice(["Thanks!", "Thank you", "Great, thanks.", "Perfect, thank you!", "ok"]), (),
                        rng.choice(["You're welcome!", "Glad I could help.", "Happy to help!"]))
    if kind == "smalltalk":
        return Exchange(rng.choice(["What is your favourite colour?", "Tell me a joke.", "How old are you?",
                                    "Do you like music?", "What should I cook tonight?", "Are you happy?"]), (),
                        rng.choice(["I am a small demo model, so I have no opinions, but I am glad to help.",
                                    "I cannot say much about that; ask me to do something and I will try.",
                                    "That is beyond what I know. I can answer simple questions and use tools."]))
    return Exchange(rng.choice(["What can you do?", "Which tools do you have?", "What tools are available?",
                                "List your functions."]), (), "I can use these tools: " + ", ".join(tool_names) + ".")


def _unserved_exchange(rng: random.Random, v: Vocab, offered: set[str]) -> Exchange:
    """A request that none of the offered tools (or no tool at all) serves: answered in words."""
    for _ in range(20):
        tool = make_tool(rng, v)
        if tool.noun not in offered:
            break
    ask = request_text(rng, tool, _args_for(rng, tool))
    verb = tool.verb_phrases[0]
    if offered:
        return Exchange(ask, (), rng.choice([f"None of my tools can {verb} a {tool.noun}, so I cannot do that.",
                                             f"I don't have a tool to {verb} a {tool.noun}."]))
    return Exchange(ask, (), rng.choice([f"I have no tools in this conversation, so I cannot {verb} the {tool.noun}.",
                                         f"No tools are available here; I can't {verb} a {tool.noun} myself."]))


def _messages(ex: Exchange) -> list[dict]:
    out: list[dict] = [{"role": "user", "content": ex.user}]
    for step in ex.steps:
        out.append({"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": n, "arguments": a}} for n, a in step.calls]})
        out.extend({"role": "tool", "content": json.dumps(r)} for r in step.results)
    out.append({"role": "assistant", "content": ex.answer})
    return out


def _offered_tools(rng: random.Random, v: Vocab, n: int) -> list[GenTool]:
    """n tools with distinct nouns (so a request's noun names exactly one of them)."""
    tools: list[GenTool] = []
    for _ in range(4 * n):
        if len(tools) == n:
            break
        t = make_tool(rng, v)
        if all(t.noun != u.noun for u in tools):
            tools.append(t)
    return tools


def make_pool_transcript(seed: int, split: str, index: int, verses: tuple[Verse, ...],
                         drill: bool = False, wide: bool = False) -> dict:
    """`drill` (layout pool-drill): short transcripts, one to three tools and one exchange, mostly a
    call. Every call is then a transcript's first, which must read the tool list (a later call may
    copy an earlier one): ~1.45x more of them per character than in the full layout. `wide` (layout
    pool-wide): the full layout over six to twelve tools, as agent harnesses offer (OpenCode: ten)."""
    rng = random.Random(f"{seed}:pool{'-drill' if drill else ''}{'-wide' if wide else ''}:{split}:{index}")
    v = vocab("heldout" if split == "heldout" else "train")
    if rng.random() < (0.08 if drill else 0.15):    # no tools offered: prose only, never a call
        exchanges = [rng.choices([lambda: _verse_exchange(rng, verses), lambda: _chat_exchange(rng, []),
                                  lambda: _unserved_exchange(rng, v, set())], weights=[0.45, 0.25, 0.3])[0]()
                     for _ in range(rng.choice([1, 1, 2]))]
        system = rng.choice(P.SYSTEM_PROMPTS[:1] + ("You are the Tandem demo assistant.", "You are a wise scribe."))
        return {"tools": None, "messages": [{"role": "system", "content": system}]
                + [m for ex in exchanges for m in _messages(ex)]}
    counts = ([1, 2, 3], [0.3, 0.4, 0.3]) if drill else ([1, 2, 3, 4, 5], [0.3, 0.3, 0.2, 0.13, 0.07])
    if wide:
        counts = (list(range(6, 13)), [1.0] * 7)
    tools = _offered_tools(rng, v, rng.choices(*counts)[0])
    specs = [t.spec(describe(rng, t)) for t in tools]
    names = [t.name for t in tools]
    exchanges: list[Exchange] = []
    for _ in range(1 if drill else rng.choices([1, 2, 3, 4], weights=[0.4, 0.3, 0.2, 0.1])[0]):
        r = rng.random()
        if r < (0.88 if drill else 0.72):
            k = 2 if len(tools) > 1 and rng.random() < 0.15 else 1
            exchanges.append(call_exchange(rng, rng.sample(tools, k)))
        elif r < 0.84:
            exchanges.append(_chat_exchange(rng, names))
        elif r < 0.93:
            exchanges.append(_verse_exchange(rng, verses))
        else:
            exchanges.append(_unserved_exchange(rng, v, {t.noun for t in tools}))
    msgs = [{"role": "system", "content": rng.choice(P.SYSTEM_PROMPTS)}]
    msgs += [m for ex in exchanges for m in _messages(ex)]
    return {"tools": specs, "messages": msgs}


def no_call_turns(transcript: dict) -> list[int]:
    """Indices of assistant messages that answer a user message in words (the right answer is no call)."""
    ms = transcript["messages"]
    return [i for i, m in enumerate(ms)
            if m["role"] == "assistant" and not m.get("tool_calls") and ms[i - 1]["role"] == "user"]
