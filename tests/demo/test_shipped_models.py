"""The committed demo models: small, loadable by transformers and by tandem, evaluated, and they
actually call tools."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from tandem_demo.chat_template import compile_template, render
from tandem_demo.schema_check import check_tool_call_turn
from tandem_demo.tools import tool_catalog, tools_by_name

ROOT = Path(__file__).resolve().parents[2] / "models"
TARGET, DRAFT = ROOT / "tandem-demo-target", ROOT / "tandem-demo-draft"
MODELS = [TARGET, DRAFT]
transformers = pytest.importorskip("transformers")


def _hf(path, dtype=torch.float32):
    return transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype).eval()


def test_weights_are_small_bf16_and_complete():
    total = sum(f.stat().st_size for f in ROOT.rglob("*") if f.is_file())
    assert total < 30 * 2**20, f"models/ holds {total / 2**20:.1f} MiB"
    from safetensors import safe_open
    for path in MODELS:
        for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                     "chat_template.jinja", "generation_config.json", "README.md", "loss_curve.png"):
            assert (path / name).is_file(), path / name
        with safe_open(str(path / "model.safetensors"), "pt") as f:
            assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"}
        gen = json.loads((path / "generation_config.json").read_text())
        assert gen["eos_token_id"] == [2, 0]
    assert (TARGET / "tokenizer.json").read_bytes() == (DRAFT / "tokenizer.json").read_bytes()


def test_parameter_counts():
    target = sum(p.numel() for p in _hf(TARGET).parameters())
    draft = sum(p.numel() for p in _hf(DRAFT).parameters())
    assert 4e6 < target < 8e6 and draft < target / 4


def _greedy_reply(tok, model, question: str, tools: list[dict]) -> str:
    prompt = render(compile_template(), [{"role": "system", "content": "You are a helpful assistant."},
                                         {"role": "user", "content": question}], tools, True)
    ids = torch.tensor([tok(prompt)["input_ids"]])
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=60,
                         do_sample=False, eos_token_id=[2, 0], pad_token_id=0)
    return tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


def test_target_calls_the_right_tool_with_the_values_asked_for():
    tok = transformers.AutoTokenizer.from_pretrained(str(TARGET))
    model = _hf(TARGET, torch.bfloat16)
    tools = [t for t in tool_catalog() if t["function"]["name"] in ("get_weather", "calculator", "send_email")]
    asks = [(f"What's the weather in {city}?", "get_weather", {"city": city})
            for city in ("Paris", "Tokyo", "Nairobi", "Lima", "Oslo")]
    asks.append(("What is 37 * 12?", "calculator", {}))   # numbers are copied less reliably than names
    for question, name, expected in asks:
        text = _greedy_reply(tok, model, question, tools)
        (check,) = check_tool_call_turn(text, tools_by_name(tools))
        assert check.ok and check.name == name, text
        arguments = json.loads(text[text.index("{"):text.rindex("}") + 1])["arguments"]
        assert {k: arguments.get(k) for k in expected} == expected, text


def test_cards_carry_the_measured_figures():
    ev = json.loads((TARGET / "eval_results.json").read_text())
    assert ev == json.loads((DRAFT / "eval_results.json").read_text())
    target_card, draft_card = (TARGET / "README.md").read_text(), (DRAFT / "README.md").read_text()
    valid = ev["tool_calls"]["valid_share"] * 100
    agree = ev["draft_agreement"]["top1_agreement"] * 100
    for card in (target_card, draft_card):
        assert f"{valid:.1f}% of {ev['tool_calls']['turns']} held-out" in card
        assert f"{agree:.1f}% of {ev['draft_agreement']['positions']} positions" in card
        assert re.search(r"Training time: [0-9.]+ minutes", card)
        assert str(ev["perplexity"]["target"]["kjv"]["perplexity"]) in card
    assert valid >= 80.0 and agree >= 50.0
    assert ev["tool_calls"]["argument_values"]["copied_share"] >= 0.5


def test_tandem_loader_matches_transformers():
    loader = pytest.importorskip("tandem.models.loader")
    from tandem.config import ModelConfig
    from tandem.testing.paged_driver import PagedDriver

    torch.set_num_threads(1)
    tok = transformers.AutoTokenizer.from_pretrained(str(TARGET))
    ids = tok("In the beginning God created the heaven and the earth.")["input_ids"]
    for path in MODELS:
        loaded = loader.load_model(ModelConfig(path=str(path), dtype="float32", show_progress=False))
        assert loaded.eos_token_ids == (2, 0)
        a = loaded.arch
        driver = PagedDriver(loaded.model, a.num_layers, a.num_kv_heads, a.head_dim, loaded.dtype, block_size=4)
        with torch.no_grad():
            ref = _hf(path)(torch.tensor([ids])).logits[0].float()
        got = torch.cat([driver.step([("s", ids[:7])]), driver.step([("s", ids[7:])])])
        torch.testing.assert_close(got, ref, atol=2e-3, rtol=1e-3)


def test_tandem_engine_greedy_equals_transformers():
    llm_mod = pytest.importorskip("tandem.engine.llm")
    from tandem.config import CacheConfig, EngineConfig, ModelConfig
    from tandem.types import SamplingParams

    tok = transformers.AutoTokenizer.from_pretrained(str(TARGET))
    prompt = render(compile_template(), [{"role": "user", "content": "What's the weather in Oslo?"}],
                    tool_catalog()[:4], True)
    ids = tok(prompt)["input_ids"]
    llm = llm_mod.LLM(EngineConfig(model=ModelConfig(path=str(TARGET), dtype="float32", show_progress=False),
                                   cache=CacheConfig(block_size=16, num_blocks=128), num_threads=1))
    try:
        (out,) = llm.generate([ids], SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True))
    finally:
        llm.shutdown()
    model, seq = _hf(TARGET), list(ids)
    with torch.no_grad():
        for _ in range(24):   # plain greedy, past any eos, as the engine does with ignore_eos
            seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
    assert out.token_ids == seq[len(ids):]
