"""Generated tools: valid schemas, values that validate, and held-out names that training never sees."""

from __future__ import annotations

import random

from tandem_demo.schema_check import validate
from tandem_demo.tool_pool import (HELDOUT_NOUNS, HELDOUT_QUALIFIERS, HELDOUT_VERBS, NOUNS, QUALIFIERS, VERBS,
                                   draw_value, make_tool, snake, vocab)

SUPPORTED = {"string", "integer", "number", "boolean"}


def _tools(split: str, n: int):
    rng, v = random.Random(f"test:{split}"), vocab(split)
    return [make_tool(rng, v) for _ in range(n)]


def test_held_out_pools_are_disjoint_from_training_pools():
    train, held = vocab("train"), vocab("heldout")
    assert not set(train.nouns) & set(held.nouns)
    assert not set(train.qualifiers) & set(held.qualifiers)
    assert set(held.nouns) == HELDOUT_NOUNS and set(held.qualifiers) == HELDOUT_QUALIFIERS
    assert not {v for v, _ in train.verbs} & HELDOUT_VERBS
    # the declared held-out words all exist in the pools (a typo would silently move one into training)
    assert HELDOUT_NOUNS <= set(NOUNS) and HELDOUT_QUALIFIERS <= set(QUALIFIERS)
    assert HELDOUT_VERBS <= {v for v, _ in VERBS}
    assert len(train.nouns) >= 100 and len(train.qualifiers) >= 30


def test_held_out_tool_and_argument_names_never_occur_in_training_tools():
    train, held = _tools("train", 3000), _tools("heldout", 1000)
    assert not {t.name for t in train} & {t.name for t in held}
    train_args = {a.name for t in train for a in t.args}
    for t in held:
        assert any(snake(n) in t.name for n in HELDOUT_NOUNS), t.name
        for a in t.args:
            if a.name.split("_")[0] in HELDOUT_QUALIFIERS or a.name.startswith(snake(t.noun)):
                assert a.name not in train_args, a.name
    assert len({t.name for t in train}) > 1500        # the pool is large, not a catalog


def test_schemas_are_in_the_validated_subset_and_drawn_values_validate():
    rng = random.Random(5)
    for tool in _tools("train", 500) + _tools("heldout", 200):
        spec = tool.spec("desc")["function"]
        params = spec["parameters"]
        assert spec["name"] == tool.name and params["type"] == "object"
        assert set(params["required"]) <= set(params["properties"]) and params["required"]
        assert len(params["properties"]) == len(tool.args)
        for arg in tool.args:
            assert arg.schema["type"] in SUPPORTED and arg.schema["description"]
            for _ in range(5):
                value = draw_value(rng, arg, tool.noun)
                assert validate(value, arg.schema) == [], (tool.name, arg.name, value)
