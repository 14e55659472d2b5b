"""Speculative proposers by method name (--speculative-config's "method"): the table that
make_proposer (tandem/spec/factory.py) reads, and the names the config and the CLI accept.

Adding a proposer: its file, with a `build(cfg: SpeculativeConfig, target: SpecTarget | None)`
that returns its drafting method (`propose(requests, limits)`, `observe`, `finished`:
tandem/spec/proposer.py), plus one line in PROPOSERS. A method with a `model` (a draft model, a
head) is given the target engine; one without gets `target` None when built outside an engine.

Each builder is named by its module path and imported only when built, so the CLI lists and
checks the methods without importing torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from tandem.config import SpeculativeConfig


@dataclass(frozen=True)
class ProposerKind:
    builder: str                 # "module:function", the method's build(cfg, target)
    needs_model: bool = False    # "model" must name the draft's directory
    # per-request adaptive lengths shorten the drafts that acceptance says do not pay; False: the
    # method sizes its drafts itself, and acceptance only switches them off
    shorten: bool = True


PROPOSERS: dict[str, ProposerKind] = {
    "ngram": ProposerKind("tandem.spec.ngram:build"),
    "suffix": ProposerKind("tandem.spec.suffix_draft:build", shorten=False),
    "draft_model": ProposerKind("tandem.spec.draft_model:build", needs_model=True),
    "eagle3": ProposerKind("tandem.spec.eagle3:build", needs_model=True),
}


def proposer_kind(cfg: SpeculativeConfig) -> ProposerKind:
    """The table's entry for `cfg`, or ValueError naming what to fix (an unknown method, a
    missing draft directory)."""
    kind = PROPOSERS.get(cfg.method)
    if kind is None:
        raise ValueError(f"speculative method {cfg.method!r}: choose one of {', '.join(PROPOSERS)}")
    if kind.needs_model and not cfg.model:
        raise ValueError(f"speculative method {cfg.method!r} needs 'model' (a directory)")
    return kind


def parse_speculative_config(text: str) -> SpeculativeConfig:
    """--speculative-config JSON (vLLM's form), checked against the table (ValueError)."""
    cfg = SpeculativeConfig.from_json(text)
    proposer_kind(cfg)
    return cfg


def methods_help() -> str:
    """The methods as the CLI's help shows them: "ngram"|"suffix"|..."""
    return "|".join(f'"{name}"' for name in PROPOSERS)


def builder(kind: ProposerKind) -> Callable:
    module, _, function = kind.builder.partition(":")
    # lazy: a method's module imports torch and its model code; the CLI reads the table without them
    return getattr(importlib.import_module(module), function)
