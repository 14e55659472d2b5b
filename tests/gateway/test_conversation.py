"""Conversations recognised from their own prompt (the demo model's ChatML template)."""

from pathlib import Path

import pytest

from tandem.gateway.conversation import assistant_marker, fingerprint, session_key
from tandem.tokenization.chat_prompt import render_chat
from tandem.tokenization.tokenizer import Tokenizer
from tandem.types import RequestContext

DEMO = Path(__file__).resolve().parents[2] / "models" / "tandem-demo-target"
SYSTEM = {"role": "system", "content": "You are a careful agent. " * 40}


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.from_dir(DEMO)


@pytest.fixture(scope="module")
def marker(tok):
    return assistant_marker(tok)


def turns(tok, task, n=3):
    """The prompts of a conversation's first n turns, each resending the one before."""
    msgs = [SYSTEM, {"role": "user", "content": task}]
    out = []
    for k in range(n):
        out.append(render_chat(tok, msgs, None))
        msgs = msgs + [{"role": "assistant", "content": f"Calling a tool, step {k}."},
                       {"role": "user", "content": f"Tool result {k}: " + "ok " * 30}]
    return out


def test_the_marker_is_the_templates_assistant_header(tok, marker):
    assert tok.convert_ids_to_tokens(list(marker)) == ["<|im_start|>", "assistant", "Ċ"]


def test_every_turn_of_a_conversation_has_its_first_turns_key(tok, marker):
    ctx = RequestContext()
    keys = {fingerprint(p, marker, ctx) for p in turns(tok, "Fix the failing test in parser.py")}
    assert len(keys) == 1 and next(iter(keys)).startswith("conv-")
    # another task under the same system prompt: another conversation
    other = fingerprint(turns(tok, "Rename the config loader", 1)[0], marker, ctx)
    assert other not in keys


def test_two_tenants_or_two_salts_with_the_same_prompt_never_share_a_key(tok, marker):
    prompt = turns(tok, "Summarise the log", 1)[0]
    keys = {fingerprint(prompt, marker, RequestContext(tenant=t, cache_salt=s))
            for t in (None, "key-0", "key-1") for s in (None, "salt")}
    assert len(keys) == 6
    # --share-prefix-cache lets tenants share blocks, not sessions
    shared = RequestContext(tenant="key-0", share_prefix_cache=True)
    assert fingerprint(prompt, marker, shared) != fingerprint(prompt, marker, RequestContext(tenant="key-1"))


def test_the_header_wins_and_no_header_without_a_marker_is_no_session(tok, marker):
    prompt = turns(tok, "Summarise the log", 1)[0]
    assert session_key(prompt, marker, RequestContext(session_id="abc")) == "abc"
    assert session_key(prompt, marker, RequestContext()) == fingerprint(prompt, marker, RequestContext())
    raw = tok.encode("Once upon a time", add_special_tokens=False)   # a completion prompt
    assert session_key(raw, marker, RequestContext()) is None
    assert session_key(prompt, None, RequestContext()) is None
    assert assistant_marker(None) is None
