"""Grammar-constrained decoding in the engine: a random-weight model at temperature 1 always
produces output its constraint accepts; proposals and resumed requests keep the output identical."""

from __future__ import annotations

import json

import pytest

from tandem.types import GrammarSpec
from tests.engine.helpers import prompts, request, run, tokens
from tests.engine.test_multi_token_step import ScriptedProposer

SCHEMA = {"type": "object",
          "properties": {"city": {"type": "string", "maxLength": 6},
                         "unit": {"enum": ["celsius", "fahrenheit"]},
                         "days": {"type": "integer", "minimum": 1, "maximum": 7},
                         "alerts": {"type": "boolean"}},
          "required": ["city", "unit", "days", "alerts"], "additionalProperties": False}
JSON_SPEC = GrammarSpec("json_schema", json.dumps(SCHEMA))


def _text(engine, out) -> str:
    return engine.tokenizer.decode(tokens(out), skip_special_tokens=True)


def _valid(obj) -> bool:
    return (set(obj) == {"city", "unit", "days", "alerts"} and isinstance(obj["city"], str)
            and len(obj["city"]) <= 6 and obj["unit"] in ("celsius", "fahrenheit")
            and type(obj["days"]) is int and 1 <= obj["days"] <= 7 and type(obj["alerts"]) is bool)


def test_random_weights_at_temperature_1_always_match_the_schema(llama_dir, make_engine):
    engine = make_engine(llama_dir)
    reqs = [request(p, max_tokens=120, temperature=1.0, seed=s, ignore_eos=False, grammar=JSON_SPEC)
            for s, p in enumerate(prompts(12, seed=60))]
    res = run(engine, reqs)
    for r in reqs:
        out = res[r.request_id]
        assert out[-1].finish_reason.value == "stop", _text(engine, out)
        assert _valid(json.loads(_text(engine, out))), _text(engine, out)


@pytest.mark.parametrize("spec,check", [
    (GrammarSpec("choice", json.dumps(["alpha", "beta", "gamma delta"])),
     lambda t: t in ("alpha", "beta", "gamma delta")),
    (GrammarSpec("regex", r"[a-f]{2,5}-[0-9]{1,3}"),
     lambda t: __import__("re").fullmatch(r"[a-f]{2,5}-[0-9]{1,3}", t) is not None),
    (GrammarSpec("json_object"), lambda t: isinstance(json.loads(t), dict)),
])
def test_other_kinds_hold_at_temperature_1(llama_dir, make_engine, spec, check):
    engine = make_engine(llama_dir)
    reqs = [request(p, max_tokens=200, temperature=1.0, seed=s, ignore_eos=False, grammar=spec)
            for s, p in enumerate(prompts(6, seed=61))]
    res = run(engine, reqs)
    for r in reqs:
        out = res[r.request_id]
        if spec.kind == "json_object" and out[-1].finish_reason.value == "length":
            continue   # an unbounded object may outgrow max_tokens; what came is still a prefix
        assert out[-1].finish_reason.value == "stop" and check(_text(engine, out)), _text(engine, out)


def test_proposals_under_a_grammar_change_nothing(llama_dir, make_engine):
    batch = prompts(4, seed=62)
    ref_engine = make_engine(llama_dir)
    reqs = [request(p, max_tokens=60, ignore_eos=False, grammar=JSON_SPEC) for p in batch]
    ref = {tuple(p): tokens(ref_engine_out) for p, ref_engine_out in
           zip(batch, (run(ref_engine, [r])[r.request_id] for r in reqs))}
    engine = make_engine(llama_dir)
    # every third proposal is wrong, which the grammar often rejects too: drafts are cut there
    engine.proposer = ScriptedProposer(ref, 4, 3, engine.loaded.arch.vocab_size)
    again = [request(p, max_tokens=60, ignore_eos=False, grammar=JSON_SPEC) for p in batch]
    res = run(engine, again)
    assert {tuple(p): tokens(res[r.request_id]) for p, r in zip(batch, again)} == ref


def test_a_resumed_request_continues_under_its_grammar(llama_dir, make_engine):
    """A handoff or a migration resends the tokens produced so far: the grammar state is rebuilt."""
    engine = make_engine(llama_dir)
    prompt = prompts(1, seed=63)[0]
    whole = tokens(run(engine, [r := request(prompt, max_tokens=60, ignore_eos=False, grammar=JSON_SPEC)])
                   [r.request_id])
    for cut in (1, 5, len(whole) // 2):
        resumed = request(prompt, max_tokens=60, ignore_eos=False, grammar=JSON_SPEC)
        resumed.resume_output_ids = whole[:cut]
        assert tokens(run(engine, [resumed])[resumed.request_id]) == whole[cut:]
