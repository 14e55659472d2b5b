"""The evaluation's pure scoring of argument values (the model-driven parts run in test_shipped_models)."""

from __future__ import annotations

from tandem_demo.evaluate import copyable_values


def test_copyable_values_counts_values_seen_in_the_conversation():
    context = "What's the weather in Paris? Then email bob@x.io"
    reference = [("get_weather", {"city": "Paris", "unit": "kelvin"}),
                 ("send_email", {"to": "bob@x.io", "subject": "Weather", "body": "It is warm."})]
    # "kelvin", "Weather" and the body are not in the context: only city and to can be copied
    assert copyable_values(reference, [], context) == (2, 0)
    produced = [("get_weather", {"city": "Paris"}), ("send_email", {"to": "alice@x.io"})]
    assert copyable_values(reference, produced, context) == (2, 1)
    # the value must come under the same tool and key; an invalid call (no arguments) copies nothing
    assert copyable_values(reference, [("send_email", {"city": "Paris"}), ("get_weather", None)], context) == (2, 0)
    assert copyable_values([("calculator", {"expression": 12})], [], "12") == (0, 0)   # strings only
