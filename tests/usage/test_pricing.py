"""The --pricing file: costs with exact numbers, and malformed files refused naming the problem."""

from __future__ import annotations

import json

import pytest

from tandem.usage.pricing import Price, TokenUsage, parse_pricing


def test_costs_price_each_token_kind_apart():
    table = parse_pricing(json.dumps({
        "default": {"input": 1.0, "output": 2.0},
        "models": {"m": {"input": 3.0, "cached_input": 0.3, "output": 15.0}}}))
    usage = TokenUsage(input_uncached=1_000_000, input_cached=2_000_000, output=500_000)
    assert table.cost("m", usage) == pytest.approx(3.0 + 0.6 + 7.5)
    assert table.price("other") == Price(1.0, 1.0, 2.0)    # no cached price: no discount
    assert table.cost("other", usage) == pytest.approx(1.0 + 2.0 + 1.0)
    assert parse_pricing(json.dumps({"models": {"m": {"input": 1, "output": 1}}})).cost("x", usage) is None


@pytest.mark.parametrize("doc, problem", [
    ({"models": {"m": {"input": -1, "output": 1}}}, "models['m'].input must be a finite number >= 0"),
    ({"models": {"m": {"input": "1", "output": 1}}}, "models['m'].input must be a number"),
    ({"models": {"m": {"input": 1}}}, "models['m']: 'output' is missing"),
    ({"models": {"m": {"input": 1, "output": 1, "cache": 0}}}, "unknown key 'cache'"),
    ({"models": {"m": {"input": 1, "output": 1, "cached_input": 2}}}, "is above input"),
    ({"default": 3}, "default must be an object"),
    ({"models": []}, "'models' must be an object"),
    ({}, "no price"),
    ({"prices": {}}, "unknown key 'prices'"),
])
def test_a_bad_file_is_refused_naming_the_problem(doc, problem):
    with pytest.raises(ValueError) as err:
        parse_pricing(json.dumps(doc), "prices.json")
    assert problem in str(err.value) and str(err.value).startswith("prices.json")
