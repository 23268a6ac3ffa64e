"""A chat template for vLLM that shows a checkpoint the prompt it was trained on.

Training renders a conversation with ``ChatFormat``: the tools are described inside the
system message in our words (``build_system_prompt`` or the compact prompt), assistant
tool calls are Hermes ``<tool_call>`` blocks in the assistant text, tool results keep
the ``tool`` role, and then the *checkpoint's own* chat template renders those plain
messages. vLLM instead passes ``tools`` and structured ``tool_calls`` to the chat
template. ``vllm_chat_template(tokenizer)`` returns a template that first rewrites the
request into our plain messages (in Jinja, with the same text as ``ChatFormat``) and
then runs the checkpoint's own template on them, so::

    tokenizer.apply_chat_template(messages, tools=tools, chat_template=vllm_chat_template(tokenizer))
    == ChatFormat(tokenizer, tools, system).render(...)

``agentgrpo serve CHECKPOINT --write-chat-template FILE`` writes it for
``vllm serve CHECKPOINT --enable-auto-tool-choice --tool-call-parser hermes --chat-template FILE``
(docs/real-models.md).
"""
from __future__ import annotations

import json
from typing import Any

from agentgrpo.agent.chat import build_compact_system_prompt, build_system_prompt

_POLICY, _TOOL = "AGENTGRPO-POLICY-8d1f", "AGENTGRPO-TOOL-8d1f"


def _literal(text: str) -> str:
    """A Jinja string literal of ``text`` (JSON's escapes are Jinja's)."""
    return json.dumps(text)


def _full_prompt_jinja() -> str:
    text = build_system_prompt(_POLICY, [{"name": _TOOL}])
    line = json.dumps({"name": _TOOL}, ensure_ascii=False)
    head, tail = text.split(line)
    assert head.startswith(_POLICY)
    return ("{%- set ns.system = (system | trim) + " + _literal(head[len(_POLICY):])
            + " + (schemas | join('\\n')) + " + _literal(tail) + " -%}")


def _compact_prompt_jinja() -> str:
    text = build_compact_system_prompt(_POLICY, [{"name": _TOOL, "parameters": {"properties": {}}}])
    head, tail = text.split(f"{_TOOL}()")
    return ("{%- set ns.system = " + _literal(head) + " + (signatures | join('\\n')) + " + _literal(tail) + " -%}")


_REWRITE = r"""{#- agentgrpo: the request rewritten into the plain messages our ChatFormat trains on -#}
{%- macro agentgrpo_text(content) -%}
{%- if content is string -%}{{ content }}{%- elif content is none -%}{%- else -%}
{%- for part in content -%}{%- if part is string -%}{{ part }}
{%- elif part is mapping and (part.type is not defined or part.type == 'text')
    and part.text is string -%}{{ part.text }}
{%- endif -%}{%- endfor -%}{%- endif -%}
{%- endmacro -%}
{%- set ns = namespace(msgs=[], system=none, rest=messages, parts=[], schemas=[], signatures=[]) -%}
{%- set system = '' -%}
{%- if messages and messages[0].role == 'system' -%}
{%- set system = agentgrpo_text(messages[0].content) -%}{%- set ns.rest = messages[1:] -%}{%- set ns.system = system -%}
{%- endif -%}
{%- if tools -%}
{%- for tool in tools -%}
{%- set fn = tool.function if tool.function is defined else tool -%}
{%- set ns.schemas = ns.schemas + [fn | tojson] -%}
{%- set params = fn.parameters.properties if fn.parameters is defined and fn.parameters.properties is defined
    else {} -%}
{%- set ns.signatures = ns.signatures + [fn.name ~ '(' ~ (params | list | join(', ')) ~ ')'] -%}
{%- endfor -%}
{%- set schemas = ns.schemas -%}{%- set signatures = ns.signatures -%}
SYSTEM_PROMPT
{%- endif -%}
{%- if ns.system is not none -%}{%- set ns.msgs = [{'role': 'system', 'content': ns.system}] -%}{%- endif -%}
{%- for m in ns.rest -%}
{%- set content = agentgrpo_text(m.content) -%}
{%- if m.role == 'assistant' and m.tool_calls is defined and m.tool_calls -%}
{%- set ns.parts = [content | trim] if content | trim else [] -%}
{%- for call in m.tool_calls -%}
{%- set fn = call.function if call.function is defined else call -%}
{%- set args = fn.arguments if fn.arguments is defined else {} -%}
{%- set args = (args if args is string else (args | tojson)) | replace('<tool_call>', '\\u003ctool_call>')
    | replace('</tool_call>', '\\u003c/tool_call>') -%}
{%- set ns.parts = ns.parts + ['<tool_call>\n{"name": ' ~ (fn.name | tojson) ~ ', "arguments": ' ~ args
    ~ '}\n</tool_call>'] -%}
{%- endfor -%}
{%- set content = ns.parts | join('\n') -%}
{%- endif -%}
{%- set ns.msgs = ns.msgs + [{'role': m.role, 'content': content}] -%}
{%- endfor -%}
{%- set messages = ns.msgs -%}
{%- set tools = none -%}
{#- the checkpoint's own template, unchanged, on those messages -#}
"""


def vllm_chat_template(tokenizer: Any, prompt_style: str = "full") -> str:
    """The checkpoint's chat template preceded by the rewrite into our messages (see the module docstring)."""
    original = getattr(tokenizer, "chat_template", None)
    if not isinstance(original, str) or not original:
        raise ValueError("the tokenizer has no chat template to wrap")
    prompt = _compact_prompt_jinja() if prompt_style == "compact" else _full_prompt_jinja()
    return _REWRITE.replace("SYSTEM_PROMPT", prompt) + original
