"""`tandem model ...`: test checkpoints and model facts (here, not in tandem/models: it builds checkpoints with tandem.testing).

  tandem model make-test OUT_DIR [--arch LlamaForCausalLM] [--hidden-size 64] [--layers 2] [--heads 4]
                                 [--kv-heads 2] [--intermediate-size 128] [--dtype float32]
                                 [--vocab-size 512] [--seed 0] [--tie-embeddings]
      writes a random Hugging Face checkpoint (config, safetensors, tokenizer, chat template).
  tandem model info PATH
      prints the parsed architecture of a model directory.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from tandem.errors import ModelLoadError
from tandem.models.arch import ModelArch
from tandem.models.registry import supported_architectures
from tandem.testing.tiny_model import write_test_model


def register(subparsers: argparse._SubParsersAction) -> None:
    model = subparsers.add_parser("model", help="model utilities (test checkpoints, info)")
    verbs = model.add_subparsers(dest="model_verb", required=True)

    make = verbs.add_parser("make-test", help="write a small random HF checkpoint with a tokenizer")
    make.add_argument("out_dir")
    make.add_argument("--arch", default="LlamaForCausalLM", choices=supported_architectures())
    make.add_argument("--hidden-size", type=int, default=64)
    make.add_argument("--layers", type=int, default=2)
    make.add_argument("--heads", type=int, default=4)
    make.add_argument("--kv-heads", type=int, default=2)
    make.add_argument("--intermediate-size", type=int, default=None, help="default: 2 x hidden size")
    make.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    make.add_argument("--vocab-size", type=int, default=512)
    make.add_argument("--max-position-embeddings", type=int, default=2048)
    make.add_argument("--seed", type=int, default=0)
    make.add_argument("--tie-embeddings", action="store_true")
    make.set_defaults(func=_make_test)

    info = verbs.add_parser("info", help="print the architecture parsed from a model directory")
    info.add_argument("path")
    info.set_defaults(func=_info)


def _make_test(args: argparse.Namespace) -> int:
    try:
        path = write_test_model(
            args.out_dir, args.arch, hidden_size=args.hidden_size, num_layers=args.layers,
            num_heads=args.heads, num_kv_heads=args.kv_heads,
            intermediate_size=args.intermediate_size or 2 * args.hidden_size, dtype=args.dtype,
            vocab_size=args.vocab_size, max_position_embeddings=args.max_position_embeddings,
            seed=args.seed, tie_word_embeddings=args.tie_embeddings)
    except ValueError as e:
        print(f"tandem model make-test: {e}", file=sys.stderr)
        return 2
    print(path)
    return 0


def _info(args: argparse.Namespace) -> int:
    try:
        arch = ModelArch.from_dir(args.path)
    except ModelLoadError as e:
        print(f"tandem model info: {e}", file=sys.stderr)
        return 2
    print(json.dumps(asdict(arch), indent=2))
    return 0
