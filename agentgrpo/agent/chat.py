"""``ChatFormat``: how a conversation with tools becomes text and tokens for one tokenizer.

The tools are always described in the system message, in our own words (the policy
text, the JSON schemas inside ``<tools></tools>``, and how to write a call), never
through a chat template's ``tools=`` argument. So the format works unchanged with any
template that renders role/content messages: ours (``agentgrpo.policy.tokenizer``) and
SmolLM2's ChatML alike.

Messages come in two shapes:

* **chat messages** — plain ``{"role", "content"}`` dicts, assistant turns holding the
  raw Hermes text, tool results as role ``tool``. This is what the template renders and
  what the rollout engine grows turn by turn.
* **OpenAI messages** — assistant turns with ``tool_calls`` (arguments as JSON strings),
  tool results with ``tool_call_id``. This is what JSONL transcripts, PRM-Lite and
  chat-completions APIs use.

``chat_messages`` and ``openai_messages`` convert between them; ``render`` accepts
either. ``encode_delta`` lets a rollout grow a conversation by appending tokens instead
of re-encoding it (see its docstring for the one assumption it makes).
"""
from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from agentgrpo.agent.format import (
    END_OF_TURN_MARKERS,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    ParsedAction,
    openai_assistant_text,
    parse_assistant,
)
from agentgrpo.agent.grammar import ToolCallGrammar, ValueKind
from agentgrpo.agent.turn import recorded_text
from agentgrpo.chat_content import content_text
from agentgrpo.envs.transcript import TranscriptBuilder
from agentgrpo.envs.types import Step

Message = dict[str, Any]

_PROBE = "agentgrpo-probe-7f3a"  # content no template rewrites, used to find the end-of-turn


def transcript_from_chat(messages: Sequence[Message], parse: Callable[[str], ParsedAction]) -> list[Message]:
    """Plain chat messages (assistant turns as Hermes text) → the OpenAI-style transcript.

    Each assistant turn is parsed with ``parse`` and recorded by ``TranscriptBuilder``: a
    call gets ``tool_calls`` with the id ``call_<k>`` (k counts the calls so far) and the
    next tool message that ``tool_call_id``; a message to the user becomes plain content; a
    malformed turn keeps its raw text (the tool message answering it, the error, has no
    call id). Assistant messages that already carry ``tool_calls`` are kept as they are;
    other messages become role/content messages.
    """
    builder = TranscriptBuilder()
    for message in messages:
        role, content = message["role"], content_text(message.get("content"))
        if role == "assistant" and message.get("tool_calls"):
            builder.add_message(message)
        elif role == "assistant":
            parsed = parse(content)
            builder.add_assistant(Step(parsed.kind, parsed.name, dict(parsed.arguments),
                                       text=recorded_text(parsed, content)))
        else:
            builder.add_reply(role, content)
    return builder.messages


def function_schema(tool: dict[str, Any]) -> dict[str, Any]:
    """The function part of a tool schema (accepts OpenAI's ``{"type", "function"}`` wrapper)."""
    return tool["function"] if "function" in tool else tool


@dataclass(frozen=True)
class ToolSignature:
    """What a tool's argument check accepts: its parameters, and the ones it requires."""

    parameters: frozenset[str]
    required: frozenset[str]

    def rejects(self, arguments: Collection[str]) -> bool:
        """Whether a call with these argument names fails the check (an argument the tool does not
        take, or one it requires missing)."""
        names = set(arguments)
        return not names <= self.parameters or not self.required <= names


def tool_signatures(schemas: Sequence[dict[str, Any]]) -> dict[str, ToolSignature]:
    """Each tool's ``ToolSignature``, read from its JSON schema (``{"function": ...}`` or flat)."""
    signatures = {}
    for schema in schemas:
        function = function_schema(schema)
        parameters = function.get("parameters", {})
        signatures[function["name"]] = ToolSignature(frozenset(parameters.get("properties", {})),
                                                     frozenset(parameters.get("required", ())))
    return signatures


def build_system_prompt(policy: str, tools: Sequence[dict[str, Any]]) -> str:
    """The system message: the policy, then the tools and how to call them."""
    schemas = "\n".join(json.dumps(function_schema(t), ensure_ascii=False) for t in tools)
    return (
        f"{policy.strip()}\n\n"
        "# Tools\n\n"
        "You can use the tools below. Each line inside <tools></tools> is the JSON schema "
        "of one tool.\n"
        f"<tools>\n{schemas}\n</tools>\n\n"
        "To use a tool, end your turn with one block of this form:\n"
        f"{TOOL_CALL_OPEN}\n"
        '{"name": "<tool name>", "arguments": {<arguments as a JSON object>}}\n'
        f"{TOOL_CALL_CLOSE}\n"
        "You may think out loud before the block, but write nothing after it: the result "
        "comes back in the next message. Use one tool per turn. A turn without a block is "
        "sent to the user as a message, so never message the user and call a tool in the "
        "same turn."
    )


def build_compact_system_prompt(policy: str, tools: Sequence[dict[str, Any]]) -> str:
    """A short system message for small models that learn the policy from demonstrations.

    The full prompt (policy text + JSON schemas) is ~3.5K tokens, most of a tiny CPU
    model's context and compute, and a few-million-parameter model cannot read it anyway.
    This one names the role, every tool with its argument names, and the call format.
    """
    signatures = []
    for tool in tools:
        schema = function_schema(tool)
        arguments = ", ".join(schema.get("parameters", {}).get("properties", {}))
        signatures.append(f"{schema['name']}({arguments})")
    return (
        "You are an airline customer service agent. Follow the airline policy: verify the "
        "user, read before you write, and get an explicit yes before any change.\n"
        "# Tools\n" + "\n".join(signatures) + "\n"
        f'Call one tool per turn: {TOOL_CALL_OPEN}{{"name": ..., "arguments": {{...}}}}{TOOL_CALL_CLOSE}'
    )


PROMPT_STYLES = {"full": build_system_prompt, "compact": build_compact_system_prompt}
"""System prompt builders by name; a checkpoint records which one it was trained with."""


def policy_view(chat: ChatFormat, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A recorded transcript as the policy sees it: our system prompt, then the chat messages."""
    rest = messages[1:] if messages and messages[0]["role"] == "system" else messages
    return [{"role": "system", "content": chat.system_prompt}, *chat.chat_messages(rest)]


class ChatFormat:
    """Rendering, tokenising and converting conversations for one tokenizer and tool set.

    Attributes:
        system_prompt: the system message content (policy + tools section, or the
            compact prompt of ``prompt_style="compact"``).
        tool_names: names the parser accepts.
        end_of_turn: the token that closes an assistant turn in this template
            (found by rendering a probe conversation, e.g. ``<|im_end|>`` for ChatML).
        end_markers: trailing tokens a parse of generated text ignores (the common
            end-of-turn tokens and ``end_of_turn``); pass them to ``play_turn``.
        eos_token_ids: ids that stop a generation; ``eos_token_ids[0]`` is the end-of-turn.
        pad_token_id: the tokenizer's pad id, or the end-of-turn id if it has none.
    """

    def __init__(
        self,
        tokenizer: Any,
        tools: Sequence[dict[str, Any]],
        policy: str,
        *,
        system_prompt: str | None = None,
        prompt_style: str = "full",
    ):
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError(
                "the tokenizer has no chat template; build one with agentgrpo.policy.tokenizer"
            )
        self.tokenizer = tokenizer
        self.tools = [dict(t) for t in tools]
        self.tool_names = frozenset(function_schema(t)["name"] for t in self.tools)
        if prompt_style not in PROMPT_STYLES:
            raise ValueError(f"unknown prompt_style {prompt_style!r}; choose one of {sorted(PROMPT_STYLES)}")
        self.prompt_style = prompt_style
        if system_prompt is None:
            system_prompt = PROMPT_STYLES[prompt_style](policy, tools)
        self.system_prompt = system_prompt
        self.end_of_turn = self._find_end_of_turn()
        self.end_of_turn_id = int(tokenizer.convert_tokens_to_ids(self.end_of_turn))
        self.end_markers: tuple[str, ...] = (*END_OF_TURN_MARKERS, self.end_of_turn)
        ids = [self.end_of_turn_id]
        if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
            ids.append(int(tokenizer.eos_token_id))
        self.eos_token_ids: list[int] = ids
        pad = tokenizer.pad_token_id
        self.pad_token_id: int = int(pad) if pad is not None else self.end_of_turn_id
        self._grammars: dict[tuple[Any, ...], ToolCallGrammar] = {}

    # -- messages ---------------------------------------------------------------------
    def initial_messages(self, first_user_message: str) -> list[Message]:
        """The opening of an episode: our system message and the user's first message."""
        return [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": first_user_message},
        ]

    def grammar(self, vocab_size: int, copy_values: bool = False,
                value_kinds: Sequence[ValueKind] = (), evidence_only: bool = False) -> ToolCallGrammar:
        """The grammar of this format's assistant turns over a model's ``vocab_size`` logits
        (built once; the rollout engine and the trainer share it). ``copy_values``,
        ``value_kinds``: see ``ToolCallGrammar``; ``evidence_only``: the assistant's own turns
        are no source of copied values (its ``own_turns``)."""
        key = (vocab_size, copy_values, tuple(value_kinds), evidence_only)
        if key not in self._grammars:
            system = self.encode(self.render([{"role": "system", "content": self.system_prompt}], False))
            own_turns = (self.assistant_header(), self.end_of_turn_id) if evidence_only else None
            self._grammars[key] = ToolCallGrammar(self.tokenizer, self.tools, self.eos_token_ids, vocab_size,
                                                  copy_values=copy_values, context_start=len(system),
                                                  value_kinds=value_kinds, own_turns=own_turns)
        return self._grammars[key]

    def assistant_header(self) -> list[int]:
        """The token ids the template writes before an assistant turn's content (its generation
        prompt: ChatML's ``<|im_start|>assistant\\n``)."""
        probe = [{"role": "user", "content": _PROBE}]
        opened, closed = self.render(probe, True), self.render(probe, False)
        if not opened.startswith(closed) or opened == closed:
            raise ValueError("the chat template writes no generation prompt after the conversation so far")
        return self.encode(opened[len(closed):])

    def parse(self, text: str) -> ParsedAction:
        """``parse_assistant`` with this format's tools and ``end_markers`` (the parse
        ``play_turn(env, text, tool_names, end_markers)`` makes of a generated turn)."""
        return parse_assistant(text, self.tool_names, end_markers=self.end_markers)

    def chat_messages(self, messages: Sequence[Message]) -> list[Message]:
        """OpenAI-style messages → plain role/content messages for the chat template.

        Assistant tool calls become Hermes blocks (``render_assistant``); tool results keep
        role ``tool``. Plain messages pass through unchanged, so this is idempotent.
        """
        converted = []
        for message in messages:
            role = message["role"]
            if role == "assistant":
                content = openai_assistant_text(message)
            else:
                content = content_text(message.get("content"))
            converted.append({"role": role, "content": content})
        return converted

    def openai_messages(self, messages: Sequence[Message]) -> list[Message]:
        """Plain chat messages → OpenAI-style messages (the inverse of ``chat_messages``).

        Each assistant turn is parsed with :meth:`parse` and recorded as
        ``transcript_from_chat`` says (the one transcript builder,
        ``agentgrpo.envs.transcript``).
        """
        return transcript_from_chat(messages, self.parse)

    # -- text and tokens ----------------------------------------------------------------
    def render(self, messages: Sequence[Message], add_generation_prompt: bool) -> str:
        """The template's text of ``messages`` (either shape), optionally opening a new turn."""
        return self.tokenizer.apply_chat_template(
            self.chat_messages(messages),
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
        )

    def encode(self, text: str) -> list[int]:
        """Token ids of rendered text (the template already wrote any special tokens)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of generated ids, special tokens kept (the parser ignores an end-of-turn)."""
        return self.tokenizer.decode(
            list(token_ids), skip_special_tokens=False, clean_up_tokenization_spaces=False
        )

    def encode_prompt(self, messages: Sequence[Message]) -> list[int]:
        """Token ids of the conversation followed by the generation prompt."""
        return self.encode(self.render(messages, add_generation_prompt=True))

    def encode_delta(
        self, messages: Sequence[Message], new_messages: Sequence[Message]
    ) -> list[int]:
        """Ids to append after an assistant turn so the model sees ``new_messages`` next.

        ``messages`` ends with the assistant turn just generated, whose sampled tokens end
        with the end-of-turn token. The delta is the text of
        ``render(messages + new_messages, True)`` after that end-of-turn token in
        ``render(messages, False)`` — the template's glue after it (ChatML's newline),
        the new messages and the generation prompt — tokenised on its own. Because it
        starts right after a special token, BPE merges cannot cross the boundary, so
        ``prompt + sampled + delta`` equals encoding the whole rendered conversation
        whenever the sampled tokens are the tokenizer's own encoding of the turn.

        Raises ValueError if the shorter render is not a prefix of the longer one (a
        template that rewrites history, e.g. one dropping earlier reasoning).
        """
        before = self.render(messages, add_generation_prompt=False)
        after = self.render(list(messages) + list(new_messages), add_generation_prompt=True)
        if not after.startswith(before):
            raise ValueError(
                "the chat template does not render the conversation so far as a prefix of the "
                "longer conversation, so tokens cannot be appended; re-encode the whole "
                "conversation instead"
            )
        cut = before.rfind(self.end_of_turn)
        if cut < 0:
            raise ValueError(
                f"no end-of-turn token {self.end_of_turn!r} in the rendered conversation"
            )
        return self.encode(after[cut + len(self.end_of_turn) :])

    # -- helpers --------------------------------------------------------------------------
    def _find_end_of_turn(self) -> str:
        """The first added token the template writes after an assistant message's content."""
        probe = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": _PROBE}]
        text = self.tokenizer.apply_chat_template(
            probe, tokenize=False, add_generation_prompt=False
        )
        tail = text[text.rfind(_PROBE) + len(_PROBE) :]
        added = set(self.tokenizer.get_added_vocab())
        for token_id in self.encode(tail):
            token = self.tokenizer.convert_ids_to_tokens(token_id)
            if token in added:
                return token
        if self.tokenizer.eos_token is not None:
            return self.tokenizer.eos_token
        raise ValueError(
            "cannot tell the end-of-turn token of this chat template, and the tokenizer has no eos"
        )
