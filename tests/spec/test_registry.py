"""The proposers' table (tandem/spec/registry.py) is what the config and the CLI accept: every
method in it builds from an engine config, one not in it is refused with the choices (before the
model loads), a method that drafts with a model asks for it, and the CLI reads the table without
importing torch."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys

import pytest
import torch

from tandem.config import SpeculativeConfig
from tandem.engine.engine import Engine
from tandem.spec.eagle3_head import Eagle3Head, init_head
from tandem.spec.eagle3_loader import config_for_target, save_head
from tandem.spec.factory import make_proposer
from tandem.spec.registry import PROPOSERS, builder, methods_help, parse_speculative_config
from tests.conftest import assert_all_blocks_free, engine_config
from tests.engine.helpers import prompts, request, run, tokens

UNKNOWN = "speculative method 'medusa': choose one of " + ", ".join(PROPOSERS)


@pytest.fixture(scope="module")
def draft_dirs(llama_dir, tmp_path_factory):
    """A directory for each method that drafts with a model: the target itself as its draft, and
    a random EAGLE-3 head for the target."""
    engine = Engine.from_config(engine_config(llama_dir))
    head = init_head(Eagle3Head(config_for_target(engine.loaded.model)), seed=0)
    head_dir = tmp_path_factory.mktemp("head")
    save_head(head, str(head_dir), dtype=torch.float32)
    engine.shutdown()
    return {"draft_model": str(llama_dir), "eagle3": str(head_dir)}


def test_the_vllm_methods_are_in_the_table():
    assert {"ngram", "suffix", "draft_model", "eagle3"} <= PROPOSERS.keys()
    assert [kind for kind in PROPOSERS if PROPOSERS[kind].needs_model] == ["draft_model", "eagle3"]
    assert all(callable(builder(kind)) for kind in PROPOSERS.values())


@pytest.mark.parametrize("method", list(PROPOSERS))
def test_every_method_in_the_table_builds_from_the_engine_config(method, llama_dir, draft_dirs, make_engine):
    model = draft_dirs.get(method)
    assert model is not None or not PROPOSERS[method].needs_model, f"give {method} a model in draft_dirs"
    half = prompts(1, seed=7, min_len=12, max_len=12)[0]
    prompt = half + half + half[:4]    # repeated text: the context-lookup methods draft too
    ref = tokens(run(make_engine(llama_dir), [r := request(prompt, max_tokens=8)])[r.request_id])
    spec = SpeculativeConfig(method, num_speculative_tokens=3, model=model, adaptive=False)
    engine = Engine.from_config(dataclasses.replace(engine_config(llama_dir), speculative=spec))
    try:
        assert engine.proposer.k == 3
        assert tokens(run(engine, [r := request(prompt, max_tokens=8)])[r.request_id]) == ref
        assert engine.spec.num_drafts > 0
        assert_all_blocks_free(engine)
    finally:
        engine.shutdown()


def test_an_unknown_method_is_refused_with_the_choices(tmp_path):
    spec = SpeculativeConfig("medusa")
    with pytest.raises(ValueError) as exc:
        make_proposer(spec)
    assert str(exc.value) == UNKNOWN
    with pytest.raises(ValueError) as exc:
        parse_speculative_config(json.dumps({"method": "medusa"}))
    assert str(exc.value) == UNKNOWN
    # before the model loads: the directory holds none
    cfg = dataclasses.replace(engine_config(str(tmp_path)), speculative=spec)
    with pytest.raises(ValueError) as exc:
        Engine.from_config(cfg)
    assert str(exc.value) == UNKNOWN


@pytest.mark.parametrize("method", [m for m, kind in PROPOSERS.items() if kind.needs_model])
def test_a_method_that_drafts_with_a_model_needs_one(method):
    message = f"speculative method {method!r} needs 'model' (a directory)"
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_speculative_config(json.dumps({"method": method}))
    with pytest.raises(ValueError, match=re.escape(message)):
        make_proposer(SpeculativeConfig(method))


def test_a_method_with_a_model_is_built_for_a_target(llama_dir):
    for method, what in (("suffix", "with a 'model' "), ("draft_model", ""), ("eagle3", "")):
        with pytest.raises(ValueError) as exc:
            make_proposer(SpeculativeConfig(method, model=str(llama_dir)))
        assert str(exc.value) == (f"speculative method {method!r} {what}needs the target engine "
                                  "(make_proposer(cfg, SpecTarget(...)))")


def test_parse_keeps_the_configs_own_checks():
    assert parse_speculative_config('{"method": "ngram", "num_speculative_tokens": 2}') == \
        SpeculativeConfig("ngram", num_speculative_tokens=2)
    with pytest.raises(ValueError, match="num_speculative_tokens must be in 1..64"):
        parse_speculative_config('{"method": "ngram", "num_speculative_tokens": 0}')


def test_the_cli_help_lists_the_table():
    assert methods_help().split("|") == [f'"{m}"' for m in PROPOSERS]
    assert methods_help().startswith('"ngram"|"suffix"|"draft_model"|"eagle3"')


def test_the_table_is_read_without_torch():
    code = ("import sys, tandem.spec.registry as r; r.methods_help(); "
            "print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
