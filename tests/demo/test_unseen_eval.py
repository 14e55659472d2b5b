"""The unseen-tools evaluation: its hand-written references are valid, and its scoring counts what it says."""

from __future__ import annotations

import json

import pytest
import torch

from tandem_demo.schema_check import check_tool_call
from tandem_demo.tool_pool import HELDOUT_NOUNS, snake
from tandem_demo.tools import tool_catalog, tools_by_name
from tandem_demo.unseen_eval import HANDWRITTEN_ASKS, HANDWRITTEN_TOOLS, _Tally, verses_from_rows


def test_handwritten_references_validate_and_are_not_catalog_tools():
    schemas = tools_by_name(HANDWRITTEN_TOOLS)
    catalog = {t["function"]["name"] for t in tool_catalog()}
    assert not set(schemas) & catalog
    assert all(any(snake(n) in name for n in HELDOUT_NOUNS) for name in schemas)
    for ask, ref in HANDWRITTEN_ASKS:
        for name, args in ref:
            assert check_tool_call(json.dumps({"name": name, "arguments": args}), schemas).ok, ask


def test_tally_scores_calls_and_word_turns():
    t = _Tally()
    ok = '<tool_call>\n{"name": "lookup_invoice", "arguments": {"invoice_id": "INV-1"}}\n</tool_call>'
    t.call(ok, HANDWRITTEN_TOOLS, [("lookup_invoice", {"invoice_id": "INV-1"})])
    t.call(ok, HANDWRITTEN_TOOLS, [("lookup_invoice", {"invoice_id": "INV-2"})])          # valid, not exact
    t.call('<tool_call>\n{"name": "lookup_verse", "arguments": {}}\n</tool_call>', HANDWRITTEN_TOOLS,
           [("lookup_invoice", {"invoice_id": "INV-1"})])                                  # unknown tool
    t.word("In the beginning God created the heaven and the earth.", "x")
    t.word(ok, "x")
    s = t.summary()
    assert (s["call_turns"], s["valid_share"], s["right_tool_share"], s["exact_share"]) == (3, 0.6667, 0.6667, 0.3333)
    assert (s["word_turns"], s["no_call_share"]) == (2, 0.5)


def test_verses_from_corpus_rows():
    rows = [{"ref": "1 Kings 2", "text": "1 Kings 2\n1 Now the days drew nigh.\n2 I go the way.\n"}]
    (a, b) = verses_from_rows(rows)
    assert (a.book, a.chapter, a.verse, a.text) == ("1 Kings", 2, 1, "Now the days drew nigh.")
    assert b.reference == "1 Kings 2:2"


def test_unseen_tools_runs_end_to_end_on_a_tiny_model(tmp_path):
    transformers = pytest.importorskip("transformers")
    from tandem_demo.unseen_eval import unseen_tools

    torch.set_num_threads(1)
    src = __import__("pathlib").Path(__file__).resolve().parents[2] / "models" / "tandem-demo-target"
    tok = transformers.AutoTokenizer.from_pretrained(str(src))
    cfg = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32,
                                   num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                   max_position_embeddings=2048)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    verses = verses_from_rows([{"ref": "Genesis 1", "text": "Genesis 1\n1 In the beginning.\n"}])
    r = unseen_tools(model, tok, verses, transcripts=2, max_new_tokens=4)
    assert r["call_turns"] == r["generated"].get("call_turns", 0) + len(HANDWRITTEN_ASKS)
    assert r["valid_share"] == 0.0                      # four random tokens never make a call
    assert r["no_tools_offered"]["no_call_share"] == 1.0


def test_required_args_quotes_and_english_are_scored():
    from tandem_demo.unseen_eval import english_share, quoted_values, result_values
    t = _Tally()
    ok = '<tool_call>\n{"name": "lookup_invoice", "arguments": {"invoice_id": "INV-1"}}\n</tool_call>'
    t.call(ok, HANDWRITTEN_TOOLS, [("lookup_invoice", {"invoice_id": "INV-1", "include_line_items": True})])
    t.call(ok, HANDWRITTEN_TOOLS, [("lookup_invoice", {"invoice_id": "INV-2"})])   # the asked value not copied
    t.answer("It is sunny, 21C in Oslo.", ["21C", "Oslo"])
    t.answer("It is sunny, -2C in Oslo.", ["21C", "Oslo"])
    words = frozenset({"in", "the", "beginning", "god", "created"})
    t.prose_reply("In the beginning God created.", words)
    t.prose_reply("Zq xv blorp the.", words)
    s = t.summary()
    assert s["required_args_equal_share"] == 0.5 and s["exact_share"] == 0.0
    assert (s["answers_after_results"], s["quotes_result_share"]) == (2, 0.5)
    assert (s["prose_replies"], s["english_share"]) == (2, 0.5)
    assert sorted(result_values('{"temp": "21C", "city": {"name": "Oslo"}, "ok": true}')) == ["21C", "Oslo"]
    assert english_share("the god zzz", words) == 2 / 3
    tr = {"messages": [{"role": "user", "content": "weather in Oslo"},
                       {"role": "assistant", "content": "", "tool_calls": [{}]},
                       {"role": "tool", "content": '{"temp": "21C", "city": "Oslo", "id": 7}'},
                       {"role": "assistant", "content": "Oslo: 21C."}]}
    assert sorted(quoted_values(tr, 3)) == ["21C", "Oslo"]   # not the id, which the answer omits
