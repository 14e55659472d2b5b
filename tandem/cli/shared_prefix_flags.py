"""`--shared-prefixes FILE` on `tandem serve`, `tandem gateway` and `tandem up` (which forwards
it to its gateway): prefixes the operator declares shared by every tenant.

Read and checked here, before anything starts (tandem/turn/shared_prefix_file.py has the format);
a file that cannot be read or parsed, or that declares nothing, is a usage error naming it. The
app tokenizes the declarations once its model's tokenizer is loaded. Under a gateway the
gateway's declaration decides (it sets each request's shared tokens, which its workers keep).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tandem.turn.shared_prefix_file import SharedPrefixDecl, parse_shared_prefixes


def add_shared_prefix_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shared-prefixes", default=None, metavar="FILE",
                   help="JSON file of prompt prefixes shared by every tenant (a system prompt as "
                        "chat messages and tools, a text, or token ids): their whole blocks are "
                        "cached for all tenants, the rest of each prompt per tenant. Public to "
                        "every tenant by declaration")


def shared_prefixes_from_args(args: argparse.Namespace) -> tuple[SharedPrefixDecl, ...]:
    path = args.shared_prefixes
    if path is None:
        return ()
    try:
        raw = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SystemExit(f"--shared-prefixes {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        return parse_shared_prefixes(raw, path)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None


def forwarded_shared_prefix_args(args: argparse.Namespace) -> tuple[str, ...]:
    """For `tandem up`'s gateway: the file as an absolute path (the gateway may start elsewhere)."""
    if args.shared_prefixes is None:
        return ()
    return ("--shared-prefixes", str(Path(args.shared_prefixes).resolve()))
