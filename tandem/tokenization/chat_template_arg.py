"""`--chat-template` (tandem serve, gateway and up), as vLLM takes it: the path of a Jinja file or
the template itself on one line. It replaces the model's own templates (the default one and any
named ones such as tool_use), for a model that has none or whose template a deployment changes.
The gateway must render prompts as its workers do (it hashes their prefixes), so `tandem up`
gives both the same one.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def _file(value: str) -> Path | None:
    """`value` as the path of an existing file, else None."""
    path = Path(value).expanduser()
    try:
        return path if path.is_file() else None
    except OSError:   # an inline template longer than a file name may be
        return None


def read_chat_template(value: str) -> str:
    """The template's source: the file at `value`, else `value` itself when it reads as a
    template (braces or a newline, as vLLM decides); ValueError otherwise."""
    path = _file(value)
    if path is not None:
        return path.read_text()
    if any(c in value for c in "{}\n"):
        return value
    raise ValueError(f"--chat-template {value!r}: no such file, and not a template either "
                     "(a Jinja chat template has {{ ... }} or {% ... %})")


def chat_template_arg(value: str) -> str:
    """argparse type of --chat-template: the template's source (a usage error when unreadable)."""
    try:
        source = read_chat_template(value)
    except (ValueError, UnicodeDecodeError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not source.strip():
        raise argparse.ArgumentTypeError(f"--chat-template {value!r} is empty")
    return source


def chat_template_flag(value: str | None) -> tuple[str, ...]:
    """The argument that passes --chat-template on to child processes (tandem up): a file as its
    absolute path (children may start elsewhere), an inline template as it is."""
    if value is None:
        return ()
    path = _file(value)
    return (f"--chat-template={path.resolve() if path is not None else value}",)
