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


def _environment() -> ImmutableSandboxedEnvironment:
    return ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                         extensions=[jinja2.ext.loopcontrols, _GenerationTag])


def compile_template(source: str) -> jinja2.Template:
    env = _environment()
    env.filters["tojson"] = _tojson
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now,
                       namespace=_SafeNamespace, dict=dict)
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as e:
        raise ChatTemplateError(f"chat template does not parse (line {e.lineno}): {e.message}") from e


def loops_over_content(source: str) -> bool:
    """Whether the template iterates over a message's content, i.e. reads OpenAI's list of
    parts ([{"type": "text", "text": ...}]) and joins them its own way (vLLM's "openai" content
    format); other templates get one string per message (vLLM's "string" format)."""
    try:
        ast = _environment().parse(source)
    except jinja2.TemplateSyntaxError:
        return False
    loops = list(ast.find_all(jinja2.nodes.For))
    message_vars = {loop.target.name for loop in loops if isinstance(loop.target, jinja2.nodes.Name)
                    and any(n.name.endswith("messages") for n in _names(loop.iter))}
    message_vars.add("message")
    content_vars = {a.target.name for a in ast.find_all(jinja2.nodes.Assign)
                    if isinstance(a.target, jinja2.nodes.Name) and _content_of(a.node, message_vars)}
    return any(_content_of(loop.iter, message_vars)
               or (isinstance(_unfiltered(loop.iter), jinja2.nodes.Name)
                   and _unfiltered(loop.iter).name in content_vars) for loop in loops)


def _names(node) -> list:
    """The Name nodes of an expression, itself included (find_all skips the node it starts at)."""
    return ([node] if isinstance(node, jinja2.nodes.Name) else []) + list(node.find_all(jinja2.nodes.Name))


def _unfiltered(node):
    while isinstance(node, jinja2.nodes.Filter) and node.node is not None:
        node = node.node
    return node


def _content_of(node, message_vars: set[str]) -> bool:
    """`node` is message.content or message['content'] (maybe filtered) for a message variable."""
    node = _unfiltered(node)
    if isinstance(node, jinja2.nodes.Getattr):
        base, key = node.node, node.attr
    elif isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Const):
        base, key = node.node, node.arg.value
    else:
        return False
    return key == "content" and isinstance(base, jinja2.nodes.Name) and base.name in message_vars


def render(template: jinja2.Template, **variables) -> str:
    try:
        return template.render(**variables)
    except jinja2.TemplateError as e:
        raise ChatTemplateError(f"chat template error: {e}") from e
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
        # the template's own logic failed on these messages (e.g. len() of a missing field)
        raise ChatTemplateError(f"chat template error: {type(e).__name__}: {e}") from e
