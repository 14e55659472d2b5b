"""The "unseen tools" evaluation: does the model read the tools it is given?

Three sets of turns, all scored on greedy output with no grammar help:
- generated: held-out `pool` transcripts (tool_pool.vocab("heldout"): tool names and qualified argument
  names that no training transcript holds), regenerated here from EVAL_SEED; every tool-call turn (first
  requests and requests after tool results) and every turn answered in words;
- hand-written: an invoice lookup and a meeting scheduler, offered together, with requests in plain words;
- no tools: prompts with no tools offered (scripture, chat, requests that look like tool requests).
A call turn is valid when every <tool_call> block names an offered tool and its arguments validate
against that tool's schema; it has the right tool when the called names equal the reference's; exact when
the calls equal the reference's. A no-call turn passes when the reply holds no <tool_call>.
"""

from __future__ import annotations

import json
import re

import torch

from tandem_demo.agent_transcripts import tool_call_turns
from tandem_demo.chat_template import compile_template, render
from tandem_demo.kjv import Verse
from tandem_demo.pool_transcripts import make_pool_transcript, no_call_turns
from tandem_demo.schema_check import check_tool_call_turn
from tandem_demo.tools import tools_by_name

EVAL_SEED = 777      # not the corpus seed: these transcripts are regenerated, never read from a corpus
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}

HANDWRITTEN_TOOLS = [
    {"type": "function", "function": {
        "name": "lookup_invoice", "description": "Look up an invoice by its number.",
        "parameters": {"type": "object", "properties": {
            "invoice_id": {"type": "string", "description": "Invoice number, e.g. INV-1042"},
            "include_line_items": {"type": "boolean", "description": "Also return the invoice's lines"}},
            "required": ["invoice_id"]}}},
    {"type": "function", "function": {
        "name": "schedule_meeting", "description": "Schedule a meeting in the team calendar.",
        "parameters": {"type": "object", "properties": {
            "title": {"type": "string", "description": "Meeting title"},
            "date": {"type": "string", "description": "Date as YYYY-MM-DD", "pattern": r"^\d{4}-\d{2}-\d{2}$"},
            "start_time": {"type": "string", "description": "Start time as HH:MM", "pattern": r"^\d{2}:\d{2}$"},
            "duration_minutes": {"type": "integer", "description": "Length in minutes", "minimum": 5,
                                 "maximum": 480}},
            "required": ["title", "date"]}}},
]
# (request, reference calls)
HANDWRITTEN_ASKS: tuple[tuple[str, list[tuple[str, dict]]], ...] = (
    ("Can you look up invoice INV-20417?", [("lookup_invoice", {"invoice_id": "INV-20417"})]),
    ("Find invoice 88213 for me.", [("lookup_invoice", {"invoice_id": "88213"})]),
    ("Look up the invoice with invoice id INV-7731.", [("lookup_invoice", {"invoice_id": "INV-7731"})]),
    ("Please pull up invoice INV-5502 with the line items.",
     [("lookup_invoice", {"invoice_id": "INV-5502", "include_line_items": True})]),
    ("What does invoice INV-3090 say?", [("lookup_invoice", {"invoice_id": "INV-3090"})]),
    ("Schedule a meeting called Budget review on 2026-03-12.",
     [("schedule_meeting", {"title": "Budget review", "date": "2026-03-12"})]),
    ("Schedule a meeting titled Sprint planning for 2026-04-02 at 14:00.",
     [("schedule_meeting", {"title": "Sprint planning", "date": "2026-04-02", "start_time": "14:00"})]),
    ("Set up a meeting: title Design sync, date 2026-05-20, start time 09:30.",
     [("schedule_meeting", {"title": "Design sync", "date": "2026-05-20", "start_time": "09:30"})]),
    ("Please schedule a meeting, title Hiring panel, date 2026-06-01, duration minutes 45.",
     [("schedule_meeting", {"title": "Hiring panel", "date": "2026-06-01", "duration_minutes": 45})]),
    ("Book a meeting named Quarterly planning on 2026-09-15.",
     [("schedule_meeting", {"title": "Quarterly planning", "date": "2026-09-15"})]),
)
# right answer: words, no call (asked with the hand-written tools offered, then again with no tools)
CHAT_ASKS = ("Hello! Who are you?", "Thanks, that is all.", "Tell me what happened in the beginning.",
             "Good morning!", "What is written in Psalms 23:1?")
# asked with no tools offered: tool-like requests must get words too
NO_TOOL_ASKS = CHAT_ASKS + (
    "Look up invoice INV-20417.", "Schedule a meeting called Budget review on 2026-03-12.",
    "What's the weather in Paris?", "Search the web for sourdough bread.", "Tell me a story about Moses.",
    "Who are you?", "Set a timer for 10 minutes.", "What can you do?", "Recite Genesis 1:1.",
    "Send an email to bob@example.com saying hello.")


def verses_from_rows(rows: list[dict]) -> tuple[Verse, ...]:
    """Verses of KJV corpus rows ({"ref": "Genesis 1", "text": "Genesis 1\\n1 In the ..."})."""
    out = []
    for r in rows:
        book, chapter = r["ref"].rsplit(" ", 1)
        for line in r["text"].splitlines()[1:]:
            n, _, text = line.partition(" ")
            out.append(Verse(book, int(chapter), int(n), text))
    return tuple(out)


@torch.no_grad()
def greedy_reply(model, tok, template, messages: list[dict], tools: list[dict] | None, max_new_tokens: int) -> str:
    eos = [tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")]
    prompt = render(template, messages, tools, add_generation_prompt=True)
    ids = torch.tensor(tok(prompt, add_special_tokens=False)["input_ids"])[None]
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                         do_sample=False, eos_token_id=eos, pad_token_id=eos[1])
    return tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


def _share(n: int, d: int) -> float:
    return round(n / max(d, 1), 4)


_WORD = re.compile(r"[A-Za-z]+")


def result_values(content: str) -> list[str]:
    """The scalar values of a tool result (JSON), as text; its whole text when it is not JSON."""
    try:
        data = json.loads(content)
    except (json.JSONDecodeError, TypeError):
        return [content.strip()] if content.strip() else []
    out: list[str] = []
    stack = [data]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            stack += list(x.values())
        elif isinstance(x, list):
            stack += x
        elif isinstance(x, bool) or x is None:
            continue
        elif str(x).strip():
            out.append(str(x))
    return out


def english_share(text: str, words: frozenset[str]) -> float:
    """Share of the alphabetic words of `text` found in `words` (1.0 for a text without words)."""
    found = [w.lower() for w in _WORD.findall(text)]
    return sum(w in words for w in found) / len(found) if found else 1.0


def required_args_equal(checks, reference: list[tuple[str, dict]], tools: list[dict]) -> bool:
    """Every call names the reference's tool and gives each of its required arguments the
    reference's value (values the request states verbatim)."""
    by_name = tools_by_name(tools)
    if len(checks) != len(reference):
        return False
    for c, (name, args) in zip(checks, reference):
        if c.name != name or not isinstance(c.arguments, dict):
            return False
        required = by_name[name].get("required", [])
        if any(c.arguments.get(k) != args.get(k) for k in required):
            return False
    return True


class _Tally:
    """Counts of one set of turns."""

    def __init__(self) -> None:
        self.calls = self.valid = self.right = self.exact = self.required = 0
        self.words = self.no_call = 0
        self.answers = self.quoted = 0     # answers after a tool result; those quoting its values
        self.prose = self.english = 0      # prose replies; those in English words
        self.failures: list[dict] = []

    def call(self, text: str, tools: list[dict], reference: list[tuple[str, dict]]) -> None:
        checks = check_tool_call_turn(text, tools_by_name(tools))
        ok = all(c.ok for c in checks)
        self.calls += 1
        self.valid += ok
        self.right += [c.name for c in checks] == [n for n, _ in reference]
        self.exact += ok and [(c.name, c.arguments) for c in checks] == reference
        self.required += ok and required_args_equal(checks, reference, tools)
        if not ok and len(self.failures) < 6:
            self.failures.append({"output": text, "reasons": [c.reason for c in checks if not c.ok]})

    def word(self, text: str, where: str) -> None:
        self.words += 1
        self.no_call += "<tool_call>" not in text
        if "<tool_call>" in text and len(self.failures) < 12:
            self.failures.append({"output": text, "reasons": [f"a call where words were right ({where})"]})

    def answer(self, text: str, values: list[str]) -> None:
        """An answer after a tool result: it should quote `values` (those the reference answer quotes)."""
        self.answers += 1
        ok = "<tool_call>" not in text and all(v in text for v in values)
        self.quoted += ok
        if not ok and len(self.failures) < 12:
            self.failures.append({"output": text, "reasons": [f"does not quote the result's values {values}"]})

    def prose_reply(self, text: str, words: frozenset[str], at_least: float = 0.8) -> None:
        self.prose += 1
        self.english += "<tool_call>" not in text and english_share(text, words) >= at_least

    def summary(self) -> dict:
        out = {}
        if self.calls:
            out |= {"call_turns": self.calls, "valid_share": _share(self.valid, self.calls),
                    "right_tool_share": _share(self.right, self.calls), "exact_share": _share(self.exact, self.calls),
                    "required_args_equal_share": _share(self.required, self.calls)}
        if self.answers:
            out |= {"answers_after_results": self.answers, "quotes_result_share": _share(self.quoted, self.answers)}
        if self.prose:
            out |= {"prose_replies": self.prose, "english_share": _share(self.english, self.prose)}
        if self.words:
            out |= {"word_turns": self.words, "no_call_share": _share(self.no_call, self.words)}
        return out | {"sample_failures": self.failures}


def _reference(message: dict) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]


def result_turns(transcript: dict) -> list[int]:
    """Indices of assistant messages in words that answer a tool result."""
    ms = transcript["messages"]
    return [i for i, m in enumerate(ms)
            if m["role"] == "assistant" and not m.get("tool_calls") and ms[i - 1]["role"] == "tool"]


def quoted_values(transcript: dict, i: int) -> list[str]:
    """The values of the tool results just before answer `i` that its reference text quotes."""
    ms, values, j = transcript["messages"], [], i - 1
    while j >= 0 and ms[j]["role"] == "tool":
        values += result_values(ms[j]["content"])
        j -= 1
    return [v for v in dict.fromkeys(values) if v in ms[i]["content"]]


def english_words(verses: tuple[Verse, ...], transcripts: list[dict]) -> frozenset[str]:
    """The words of the verses and of the reference messages: the English the model was taught."""
    texts = [v.text for v in verses] + [m.get("content") or "" for t in transcripts for m in t["messages"]]
    return frozenset(w.lower() for t in texts for w in _WORD.findall(t))


def unseen_tools(model, tok, verses: tuple[Verse, ...], transcripts: int = 60, max_new_tokens: int = 160,
                 seed: int = EVAL_SEED) -> dict:
    """`seed`: of the generated transcripts; never a training corpus's seed (tandem_demo/v3.py checks)."""
    template = compile_template()
    gen, offered_words, hand, none = _Tally(), _Tally(), _Tally(), _Tally()
    generated = [make_pool_transcript(seed, "heldout", i, verses) for i in range(transcripts)]
    words = english_words(verses, generated)
    for tr in generated:
        for j in result_turns(tr):
            values = quoted_values(tr, j)
            if values:
                gen.answer(greedy_reply(model, tok, template, tr["messages"][:j], tr["tools"], max_new_tokens),
                           values)
        for j in tool_call_turns(tr):
            gen.call(greedy_reply(model, tok, template, tr["messages"][:j], tr["tools"], max_new_tokens),
                     tr["tools"], _reference(tr["messages"][j]))
        for j in no_call_turns(tr):
            tally = offered_words if tr["tools"] else none
            tally.word(greedy_reply(model, tok, template, tr["messages"][:j], tr["tools"], max_new_tokens),
                       "generated")
    for ask, ref in HANDWRITTEN_ASKS:
        msgs = [SYSTEM, {"role": "user", "content": ask}]
        hand.call(greedy_reply(model, tok, template, msgs, HANDWRITTEN_TOOLS, max_new_tokens), HANDWRITTEN_TOOLS, ref)
    for ask in CHAT_ASKS:
        msgs = [SYSTEM, {"role": "user", "content": ask}]
        offered_words.word(greedy_reply(model, tok, template, msgs, HANDWRITTEN_TOOLS, max_new_tokens), ask)
    for ask in NO_TOOL_ASKS:
        msgs = [SYSTEM, {"role": "user", "content": ask}]
        reply = greedy_reply(model, tok, template, msgs, None, max_new_tokens)
        none.word(reply, ask)
        none.prose_reply(reply, words)
    all_calls = gen.calls + hand.calls
    return {
        "seed": seed,
        "call_turns": all_calls,
        "valid_share": _share(gen.valid + hand.valid, all_calls),
        "right_tool_share": _share(gen.right + hand.right, all_calls),
        "exact_share": _share(gen.exact + hand.exact, all_calls),
        "required_args_equal_share": _share(gen.required + hand.required, all_calls),
        "quotes_result_share": _share(gen.quoted, gen.answers),
        "english_share": _share(none.english, none.prose),
        "generated": gen.summary(), "handwritten": hand.summary(),
        "tools_offered_no_call": offered_words.summary(), "no_tools_offered": none.summary(),
    }
