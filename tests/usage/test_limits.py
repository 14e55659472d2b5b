"""The --rate-limits file and --rate-limit flags: the rule that applies, the reservation, and
every malformed input refused with its place named."""

from __future__ import annotations

import json

import pytest

from tandem.usage.limits import (
    BATCH, INTERACTIVE, Limit, RateLimits, parse_rate_limits, with_default_settings,
)

FILE = {
    "reserve_output_tokens": 100,
    "default": {"requests_per_minute": 60, "batch": {"requests_per_minute": 600}},
    "limits": [
        {"account": "key-0", "requests_per_minute": 10},
        {"account": "key-0", "model": "m", "output_tokens_per_minute": 500},
        {"model": "m", "input_tokens_per_minute": 1000},
        {"account": "key-9", "batch": {"input_tokens_per_minute": 50}},
    ],
}


def test_the_most_specific_rule_applies_alone():
    limits = parse_rate_limits(json.dumps(FILE))
    assert limits.limit_for("key-0", "m", INTERACTIVE) == Limit(output_tokens=500)
    assert limits.limit_for("key-0", "other", INTERACTIVE) == Limit(requests=10)
    assert limits.limit_for("key-1", "m", INTERACTIVE) == Limit(input_tokens=1000)
    assert limits.limit_for("key-1", "other", INTERACTIVE) == Limit(requests=60)
    assert limits.limit_for("key-1", "other", BATCH) == Limit(requests=600)
    assert limits.limit_for("key-0", "m", BATCH) is None          # the chosen rule has no batch limit
    assert limits.limit_for("key-9", "x", INTERACTIVE) is None
    assert limits.limit_for("key-9", "x", BATCH) == Limit(input_tokens=50)
    assert RateLimits().limit_for("a", "m", INTERACTIVE) is None


def test_the_output_reservation_is_capped_by_max_tokens_the_setting_and_the_limit():
    limits = parse_rate_limits(json.dumps(FILE))
    assert limits.reservation(30, Limit()) == 30
    assert limits.reservation(4096, Limit()) == 100
    assert limits.reservation(4096, Limit(output_tokens=64)) == 64


@pytest.mark.parametrize("doc, problem", [
    ({"default": {"requests_per_minute": 0}}, "default.requests_per_minute must be positive, not 0"),
    ({"default": {"requests_per_minute": -5}}, "must be positive, not -5"),
    ({"default": {"requests_per_minute": 1.5}}, "must be a positive integer, not 1.5"),
    ({"default": {"requests_per_minute": True}}, "must be a positive integer"),
    ({"default": {"batch": {"output_tokens_per_minute": 0}}}, "default.batch.output_tokens_per_minute"),
    ({"default": {"rpm": 5}}, "unknown key 'rpm'"),
    ({"limits": [{"account": "a"}, {"account": "a", "model": "*"}]}, "limits[1] repeats the rule"),
    ({"limits": {"a": 1}}, "'limits' must be a list"),
    ({"limits": [{"account": 3}]}, "limits[0].account must be a string"),
    ({"reserve_output_tokens": 0}, "reserve_output_tokens must be positive"),
    ({"defaults": {}}, "unknown key 'defaults'"),
    ([], "the top level must be an object"),
])
def test_a_bad_file_is_refused_naming_the_problem(doc, problem):
    with pytest.raises(ValueError) as err:
        parse_rate_limits(json.dumps(doc), "limits.json")
    assert problem in str(err.value) and str(err.value).startswith("limits.json")


def test_not_json_is_refused():
    with pytest.raises(ValueError, match="limits.json: not JSON"):
        parse_rate_limits("{", "limits.json")


def test_flags_set_the_default_rule_over_the_file():
    limits = with_default_settings(parse_rate_limits(json.dumps(FILE)),
                                   ["input_tokens_per_minute=5000", "batch.requests_per_minute=9",
                                    "reserve_output_tokens=8"])
    assert limits.limit_for("key-1", "other", INTERACTIVE) == Limit(requests=60, input_tokens=5000)
    assert limits.limit_for("key-1", "other", BATCH) == Limit(requests=9)
    assert limits.reserve_output_tokens == 8
    assert limits.limit_for("key-0", "m", INTERACTIVE) == Limit(output_tokens=500)   # rules stay
    with pytest.raises(ValueError, match="must be positive, not 0"):
        with_default_settings(RateLimits(), ["requests_per_minute=0"])
    with pytest.raises(ValueError, match="NAME=VALUE"):
        with_default_settings(RateLimits(), ["requests_per_minute"])
    with pytest.raises(ValueError, match="unknown key 'rpm'"):
        with_default_settings(RateLimits(), ["rpm=3"])
