"""The demo models' chat template (ChatML with Hermes/Qwen-style tools) and a renderer for it.

Format:
    <|im_start|>system\n{system}\n\n# Tools ... <tools>\n{function json per line}\n</tools> ...<|im_end|>\n
    <|im_start|>user\n{text}<|im_end|>\n
    <|im_start|>assistant\n{text}\n<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call><|im_end|>\n
    <|im_start|>user\n<tool_response>\n{result}\n</tool_response><|im_end|>\n   (consecutive tool messages share one turn)
A conversation without a system message gets DEFAULT_SYSTEM (every training transcript has one, so a
bare user turn would otherwise be unlike anything the demo models saw).
The template is compiled by the serving path's chat template module (tandem/tokenization/chat_template.py:
transformers' Jinja settings), so training and serving render the same string; a test checks this.
"""

from __future__ import annotations

import json

import jinja2

from tandem.tokenization.chat_template import compile_template as compile_served_template

TOOLS_PREAMBLE = (
    "# Tools\n\nYou may call one or more functions to help with the user's request. "
    "The available functions are listed inside <tools></tools>:\n<tools>"
)
TOOLS_POSTAMBLE = (
    "\n</tools>\n\nTo call a function, reply with a JSON object inside <tool_call></tool_call> tags:\n"
    "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>"
)
DEFAULT_SYSTEM = "You are a helpful assistant."

CHAT_TEMPLATE = (
    "{%- if messages and messages[0].role == 'system' %}"
    "{%- set system_message = messages[0].content %}{%- set loop_messages = messages[1:] %}"
    "{%- else %}"
    "{%- set system_message = '" + DEFAULT_SYSTEM + "' %}{%- set loop_messages = messages %}"
    "{%- endif %}"
    "{{- '<|im_start|>system\\n' + system_message }}"
    "{%- if tools %}"
    "{{- '\\n\\n' + " + json.dumps(TOOLS_PREAMBLE) + " }}"
    "{%- for tool in tools %}"
    "{{- '\\n' }}{{- (tool.function if tool.function is defined else tool) | tojson }}"
    "{%- endfor %}"
    "{{- " + json.dumps(TOOLS_POSTAMBLE) + " }}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- for message in loop_messages %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if message.content %}{{- message.content }}{%- endif %}"
    "{%- if message.tool_calls %}"
    "{%- for tc in message.tool_calls %}"
    "{%- set call = tc.function if tc.function is defined else tc %}"
    "{%- if message.content or not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": \"' + call.name + '\", \"arguments\": ' }}"
    "{%- if call.arguments is string %}{{- call.arguments }}{%- else %}{{- call.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or loop_messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or loop_messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}"
    "{{- raise_exception('unsupported message role: ' + message.role) }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def compile_template(source: str = CHAT_TEMPLATE) -> jinja2.Template:
    """The template compiled in the serving path's own Jinja environment (tandem/tokenization)."""
    return compile_served_template(source)


def render(template: jinja2.Template, messages: list[dict], tools: list[dict] | None = None,
           add_generation_prompt: bool = False) -> str:
    """The conversation as the model sees it."""
    return template.render(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt)
