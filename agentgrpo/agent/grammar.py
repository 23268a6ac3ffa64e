"""Schema-guided decoding of assistant turns: the grammar of our Hermes format, with llguidance.

An assistant turn is free text (a message to the user), or optional free text followed by
exactly one ``<tool_call>`` block whose JSON names a known tool and whose ``arguments``
satisfy that tool's JSON schema: every required argument present, no unknown one, enums
(cabin, flight type, insurance) from their values, integers where integers belong. The
grammar is written in llguidance's Lark dialect with one ``%json`` rule per tool, and the
JSON is laid out as ``render_tool_call`` writes it (``", "`` and ``": "``, arguments in the
schema's order), so every demonstration the SFT learns from is a sentence of it (a test
checks all of them).

``ToolCallGrammar`` turns it into token masks for one tokenizer: the sampler draws each
token of a turn from the policy's distribution restricted to the tokens the grammar allows
next (``fill``/``advance``), and ``turn_masks`` replays a sampled turn to give the trainer the
same masks, so the log-probs it recomputes are those of the distribution the sampler drew
from and the importance ratio stays exact. Masks are packed bits, 32 tokens per int32
(llguidance's layout): bit ``t % 32`` of word ``t // 32`` is set when token ``t`` is allowed.

Torch-free (numpy): the rollout engine and the trainer unpack the bits
(``agentgrpo.algos.token_mask``).
"""
from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from typing import Any, Protocol

import numpy as np

from agentgrpo.agent.format import TOOL_CALL_CLOSE, TOOL_CALL_OPEN

# JSON laid out as json.dumps writes it by default (render_tool_call), no other whitespace
_JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}

FREE_TEXT_ARGUMENTS: frozenset[str] = frozenset({"thought", "summary", "expression"})
"""String arguments the agent writes itself (τ-bench's think, transfer summary, calculator
expression); every other string argument of a tool is a value it copies from the conversation."""

# a word of the conversation: what lies between spaces, quotes, brackets and punctuation
_WORD = re.compile(r"[^\s\"'{}\[\](),:;!?]+")
_WORD_END = ".'"


def context_values(text: str) -> list[str]:
    """The words of ``text`` a copied argument may take (sorted, each once): ids, slots
    (``<R1>``), codes, dates, names; a sentence's closing period is not part of its last word.
    A JSON key is a word too: a tool's record may key its entries by id (a profile's payment
    methods are ``{"<P1>": {...}}``)."""
    return sorted({word.rstrip(_WORD_END) for word in _WORD.findall(text)} - {""})


def copy_schema(schema: dict[str, Any], values: Sequence[str] | Callable[[str | None], Sequence[str]],
                free_text: Collection[str], name: str | None = None) -> dict[str, Any]:
    """``schema`` with every copied string argument (a string without an enum, not named in
    ``free_text``) restricted to ``values``: the words it may take, or a function of the
    argument's name giving them (``values_by_kind``)."""
    out = dict(schema)
    if out.get("type") == "object":
        out["properties"] = {key: copy_schema(sub, values, free_text, key)
                             for key, sub in out.get("properties", {}).items()}
    elif out.get("type") == "array" and isinstance(out.get("items"), dict):
        out["items"] = copy_schema(out["items"], values, free_text, name)
    elif out.get("type") == "string" and "enum" not in out and name not in free_text:
        out["enum"] = list(values(name) if callable(values) else values)
    return out


class ValueKind(Protocol):
    """A kind of id as ``agentgrpo.envs.delex.IdKind`` declares it (what the grammar reads of it)."""

    tag: str
    pattern: str
    arguments: tuple[str, ...]


_SLOT_WORD = re.compile(r"<([A-Z])[1-9][0-9]*>")


def word_kind(word: str, kinds: Sequence[ValueKind]) -> str | None:
    """The tag of the kind of id ``word`` is: a slot of that kind (``<R2>``), or an id its
    pattern matches whole (kinds tried in order, as delexicalisation does); None for any other
    word (a date, a code, a name)."""
    slot = _SLOT_WORD.fullmatch(word)
    tags = {kind.tag for kind in kinds}
    if slot is not None and slot.group(1) in tags:
        return slot.group(1)
    return next((kind.tag for kind in kinds if re.fullmatch(kind.pattern, word)), None)


def values_by_kind(values: Sequence[str], kinds: Sequence[ValueKind]) -> Callable[[str | None], list[str]]:
    """For ``copy_schema``: an argument a kind names (``reservation_id``) takes the words of that
    kind, any other copied argument the words of no kind: a reservation id is never a flight
    number, a user id or an airport, nor an airport an id."""
    by_tag: dict[str | None, list[str]] = {}
    for word in values:
        by_tag.setdefault(word_kind(word, kinds), []).append(word)
    tag_of = {argument: kind.tag for kind in kinds for argument in kind.arguments}
    return lambda name: by_tag.get(tag_of.get(name or ""), [])


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's parameter schema as the grammar enforces it: objects admit no property the
    schema does not name, descriptions (which constrain nothing) are dropped."""
    out = {key: value for key, value in schema.items() if key != "description"}
    if out.get("type") == "object":
        out["properties"] = {name: strict_schema(sub) for name, sub in out.get("properties", {}).items()}
        out["additionalProperties"] = False
    if out.get("type") == "array" and isinstance(out.get("items"), dict):
        out["items"] = strict_schema(out["items"])
    return out


def _lark_string(text: str) -> str:
    return json.dumps(text)  # a JSON string literal is a valid Lark string literal


def turn_grammar(tools: Sequence[dict[str, Any]], tag_tokens: tuple[int, int] | None = None,
                 values: Sequence[str] | Callable[[str | None], Sequence[str]] | None = None,
                 free_text: Collection[str] = FREE_TEXT_ARGUMENTS) -> str:
    """The Lark grammar (llguidance dialect) of one assistant turn for these OpenAI tool schemas.

    tag_tokens: the ids of ``<tool_call>`` and ``</tool_call>`` when the tokenizer writes
    each as one token (ours does): the grammar then names those tokens, and free text is
    any text. Without them the tags are spelled out and free text may not contain ``<``
    (the lexer must know where the text ends without looking ahead).
    values: when given, the words a copied string argument may take, or a function of its name
    giving them (``copy_schema``); a tool with an argument that may take no word is left out
    (nothing could be written there).
    """
    calls, rules = [], []
    for index, tool in enumerate(tools):
        function = tool["function"] if "function" in tool else tool
        parameters = strict_schema(function.get("parameters") or {"type": "object", "properties": {}})
        if values is not None:
            parameters = copy_schema(parameters, values, free_text)
            if _has_empty_enum(parameters):
                continue
        parameters["x-guidance"] = _JSON_LAYOUT
        opening = '{"name": ' + json.dumps(function["name"], ensure_ascii=False) + ', "arguments": '
        calls.append(f"{_lark_string(opening)} arguments_{index} \"}}\"")
        rules.append(f"arguments_{index}: %json {json.dumps(parameters, ensure_ascii=False)}")
    if tag_tokens is not None:
        open_tag, close_tag = (f"<[{int(token)}]>" for token in tag_tokens)
        text = "/(.|\\n)+/"
    else:
        open_tag, close_tag = _lark_string(TOOL_CALL_OPEN), _lark_string(TOOL_CALL_CLOSE)
        text = "/[^<]+/"
    if not calls:
        return f"start: TEXT\nTEXT: {text}\n"
    return "\n".join([
        "start: TEXT | TEXT? call_block",
        f'call_block: {open_tag} "\\n" call "\\n" {close_tag}',
        "call: " + " | ".join(calls),
        *rules,
        f"TEXT: {text}",
    ]) + "\n"


def _has_empty_enum(schema: dict[str, Any]) -> bool:
    if schema.get("enum") == []:
        return True
    items = schema.get("items")
    children = [*schema.get("properties", {}).values(), *([items] if isinstance(items, dict) else [])]
    return any(_has_empty_enum(child) for child in children)


def without_turns(ids: Sequence[int], header: Sequence[int], end: int) -> list[int]:
    """``ids`` without the turns that ``header`` opens: from each occurrence of ``header``
    through the next ``end`` token (the last turn, still open, to the end)."""
    header, out, k = list(header), [], 0
    while k < len(ids):
        if header and list(ids[k : k + len(header)]) == header:
            k += len(header)
            while k < len(ids) and ids[k] != end:
                k += 1
            k += 1  # its end token
        else:
            out.append(ids[k])
            k += 1
    return out


def single_token(tokenizer: Any, text: str) -> int | None:
    """The id of ``text`` if the tokenizer writes it as exactly one token, else None."""
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    return int(ids[0]) if len(ids) == 1 else None


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet: the printable character that stands for each byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[chr(byte)] = byte
        else:
            chars[chr(256 + extra)] = byte
            extra += 1
    return chars


def token_bytes(tokenizer: Any, vocab_size: int) -> tuple[list[bytes], list[int]]:
    """The bytes each token id stands for, and the ids of the special tokens.

    Added tokens that are not special (our ``<tool_call>``, the delexicalised ``<F1>``...)
    are text like any other: the grammar must be able to write them inside JSON strings.
    Byte-level BPE pieces are mapped back to their bytes; other tokenizers' pieces are
    decoded one by one. Ids past the tokenizer (a padded embedding) stand for nothing.
    """
    added = dict(getattr(tokenizer, "added_tokens_decoder", {}) or {})
    special = sorted(i for i, token in added.items() if getattr(token, "special", False) and i < vocab_size)
    decoder = json.loads(tokenizer.backend_tokenizer.to_str()).get("decoder") or {}
    byte_level = decoder.get("type") == "ByteLevel"
    alphabet = _byte_level_alphabet()
    pieces = tokenizer.convert_ids_to_tokens(list(range(min(len(tokenizer), vocab_size))))
    out: list[bytes] = []
    for token_id, piece in enumerate(pieces):
        if token_id in added:
            out.append(added[token_id].content.encode("utf-8"))
        elif byte_level and piece is not None and all(ch in alphabet for ch in piece):
            out.append(bytes(alphabet[ch] for ch in piece))
        else:
            out.append(tokenizer.decode([token_id], clean_up_tokenization_spaces=False).encode("utf-8"))
    out += [b""] * (vocab_size - len(out))
    return out, special


class _TokenTable:
    """What ``llguidance.LLTokenizer`` reads from a tokenizer (its ``TokenizerWrapper`` protocol)."""

    def __init__(self, tokenizer: Any, vocab_size: int, eos_token_id: int, extra_special: Sequence[int] = ()):
        self.tokens, special = token_bytes(tokenizer, vocab_size)
        # the grammar names these by id; as special tokens no free text can spell them
        self.special_token_ids = sorted({*special, *extra_special})
        self.eos_token_id = eos_token_id
        self.bos_token_id = None
        self._tokenizer = tokenizer

    def __call__(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False))


class ToolCallGrammar:
    """Token masks of ``turn_grammar(tools)`` for one tokenizer (see the module docstring).

    eos_token_ids: the tokens that end a turn; the grammar allows them once the turn is
    complete (and only then: after ``</tool_call>`` nothing else may follow).
    vocab_size: the width of the model's logits (an embedding may be wider than the tokenizer).
    copy_values: copied string arguments must be words of the conversation so far
    (``context_values`` of the decoded tokens before the turn, after the first
    ``context_start``: the system prompt, whose tool and argument names are no values): a
    policy that knows an id's or a date's shape but not which one to copy picks among those in
    its context, not from memory.
    free_text: the string arguments exempt from that (``FREE_TEXT_ARGUMENTS``).
    value_kinds: with ``copy_values``, the domain's kinds of id (``IdKind``): an argument a kind
    names takes only the words of that kind, every other copied argument only words of no kind
    (``values_by_kind``); a tool whose id argument has no such word yet cannot be called.
    own_turns: with ``copy_values``, ``(header, end)``: the token ids that open one of the
    policy's own turns and the one that closes it; the words between are no source of values
    (what the agent wrote itself is no evidence: only the user and the tools give values).
    """

    def __init__(self, tokenizer: Any, tools: Sequence[dict[str, Any]], eos_token_ids: Sequence[int],
                 vocab_size: int, *, copy_values: bool = False,
                 free_text: Collection[str] = FREE_TEXT_ARGUMENTS, context_start: int = 0,
                 value_kinds: Sequence[ValueKind] = (), own_turns: tuple[Sequence[int], int] | None = None):
        import llguidance  # imported on first use: unconstrained decoding never needs it

        self.vocab_size = vocab_size
        self.eos_token_ids = tuple(int(t) for t in eos_token_ids)
        self.words = (vocab_size + 31) // 32
        self.copy_values, self.context_start = copy_values, context_start
        self.value_kinds = tuple(value_kinds)
        self.own_turns = (tuple(int(t) for t in own_turns[0]), int(own_turns[1])) if own_turns else None
        self.tools, self.free_text = [dict(t) for t in tools], frozenset(free_text)
        tags = (single_token(tokenizer, TOOL_CALL_OPEN), single_token(tokenizer, TOOL_CALL_CLOSE))
        self.tag_tokens = tags if None not in tags else None
        self.lark = turn_grammar(tools, self.tag_tokens)
        table = _TokenTable(tokenizer, vocab_size, int(eos_token_ids[0]), extra_special=self.tag_tokens or ())
        self._llguidance = llguidance
        self._tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(table), n_vocab=vocab_size,
                                                 eos_token=[int(t) for t in eos_token_ids])
        # the conversation's text: a template's markers (<|im_end|>) are not words of it
        self._decode = lambda ids: tokenizer.decode(list(ids), skip_special_tokens=True,
                                                    clean_up_tokenization_spaces=False)
        self._grammar = self._compile(self.lark)
        self._by_values: OrderedDict[tuple[str, ...], str] = OrderedDict()

    def _compile(self, lark: str) -> str:
        grammar = self._llguidance.LLMatcher.grammar_from_lark(lark)
        is_error, messages = self._llguidance.LLMatcher.validate_grammar_with_warnings(grammar, self._tokenizer)
        if is_error:
            raise ValueError(f"the tool-call grammar does not compile: {messages[0]}")
        return grammar

    def grammar_for(self, context: Sequence[int] = ()) -> str:
        """The grammar of a turn that follows the tokens ``context`` (the conversation so far)."""
        if not self.copy_values:
            return self._grammar
        said = list(context)[self.context_start :]
        if self.own_turns is not None:
            said = without_turns(said, *self.own_turns)
        values = tuple(context_values(self._decode(said)))
        if values not in self._by_values:
            choices = values_by_kind(values, self.value_kinds) if self.value_kinds else values
            lark = turn_grammar(self.tools, self.tag_tokens, choices, self.free_text)
            self._by_values[values] = self._llguidance.LLMatcher.grammar_from_lark(lark)
            if len(self._by_values) > 256:  # the recent episodes' contexts
                self._by_values.popitem(last=False)
        self._by_values.move_to_end(values)
        return self._by_values[values]

    def matcher(self, context: Sequence[int] = ()) -> Any:
        """A fresh matcher at the start of a turn that follows ``context`` (``llguidance.LLMatcher``)."""
        return self._llguidance.LLMatcher(self._tokenizer, self.grammar_for(context), log_level=0)

    def empty_masks(self, rows: int) -> np.ndarray:
        """(rows, words) int32 masks, every token allowed."""
        return np.full((rows, self.words), -1, dtype=np.int32)

    def fill(self, matcher: Any, masks: np.ndarray, row: int) -> None:
        """Write the tokens ``matcher`` allows next into ``masks[row]``.

        A matcher in an error state (a token was forced past the grammar: a turn cut at its
        token budget and ended by the engine) leaves every token allowed rather than none.
        """
        if matcher.is_error():
            masks[row] = -1
            return
        view = masks[row]
        matcher.unsafe_compute_mask_ptr(view.ctypes.data, view.size * view.itemsize)

    @staticmethod
    def advance(matcher: Any, token: int) -> None:
        """``matcher`` takes the sampled ``token`` (an error state is kept, see ``fill``)."""
        if not matcher.is_error():
            matcher.consume_token(int(token))

    def turn_masks(self, tokens: Sequence[int], context: Sequence[int] = ()) -> np.ndarray:
        """(len(tokens), words) masks: row k is what the grammar allowed before ``tokens[k]``,
        ``tokens`` being one turn as sampled (from its first token through its end-of-turn),
        after the tokens ``context``."""
        masks = self.empty_masks(len(tokens))
        matcher = self.matcher(context)
        for k, token in enumerate(tokens):
            self.fill(matcher, masks, k)
            self.advance(matcher, token)
        return masks

    def accepts(self, tokens: Sequence[int], context: Sequence[int] = ()) -> bool:
        """Whether ``tokens`` (one turn, its end-of-turn included) is a complete sentence after ``context``."""
        if not tokens or int(tokens[-1]) not in self.eos_token_ids:
            return False
        matcher = self.matcher(context)
        return bool(matcher.consume_tokens([int(t) for t in tokens])) and not matcher.is_error()

