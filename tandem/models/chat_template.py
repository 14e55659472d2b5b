"""Chat templates: Jinja2 in an immutable sandbox, with the globals Hub templates expect.

Same environment settings as transformers' apply_chat_template (trim_blocks, lstrip_blocks,
loop controls), so a template renders the same text here and there. Templates are untrusted
code: the sandbox forbids attribute tricks and mutation of the inputs.
"""

from __future__ import annotations

import json
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from tandem.errors import ChatTemplateError

__all__ = ["ChatTemplateError", "compile_template", "render"]


def _raise_exception(message: str):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value, ensure_ascii: bool = False, indent=None, separators=None, sort_keys: bool = False) -> str:
    # Jinja's own tojson escapes HTML characters; templates expect plain json.dumps
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _check_attribute(name) -> None:
    if isinstance(name, str) and name.startswith("_"):
        raise jinja2.exceptions.SecurityError(f"namespace attribute {name!r} is not allowed")


class _SafeNamespace(jinja2.utils.Namespace):
    """namespace() without underscore-prefixed attributes (no route to CPython internals)."""

    def __init__(*args, **kwargs):
        for name in kwargs:
            _check_attribute(name)
        for arg in args[1:]:
            for name in dict(arg):
                _check_attribute(name)
        jinja2.utils.Namespace.__init__(*args, **kwargs)

    def __setitem__(self, name, value):
        _check_attribute(name)
        super().__setitem__(name, value)


class _GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`: marks the assistant's tokens for training
    masks (transformers' extension); rendering keeps its body as is."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def compile_template(source: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols, _GenerationTag])
    env.filters["tojson"] = _tojson
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now,
                       namespace=_SafeNamespace, dict=dict)
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as e:
        raise ChatTemplateError(f"chat template does not parse (line {e.lineno}): {e.message}") from e


def render(template: jinja2.Template, **variables) -> str:
    try:
        return template.render(**variables)
    except jinja2.TemplateError as e:
        raise ChatTemplateError(f"chat template error: {e}") from e
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
        # the template's own logic failed on these messages (e.g. len() of a missing field)
        raise ChatTemplateError(f"chat template error: {type(e).__name__}: {e}") from e
