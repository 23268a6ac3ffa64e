"""A byte-level BPE tokenizer trained on the airline domain, with a ChatML chat template.

The built presets (``tiny``, ``small``) get a tokenizer of their own, trained with HF
``tokenizers`` on the text the policy will actually read and write: the policy, the
tool schemas, the system prompt, database records as the tools print them, task
instructions and (passed in by the trainer) rendered teacher transcripts. A small
vocabulary trained on that text gives short sequences, which is what makes CPU
training affordable.

Special tokens: ``<|endoftext|>`` (bos and pad), ``<|im_start|>`` and ``<|im_end|>``
(ChatML turn markers; ``<|im_end|>`` is the eos, i.e. the end of an assistant turn).
``<tool_call>`` and ``</tool_call>`` are single added tokens that are *not* special, so
``decode(..., skip_special_tokens=True)`` keeps them. The result is a standard
``PreTrainedTokenizerFast`` whose ``save_pretrained`` directory loads back with
``AutoTokenizer.from_pretrained``.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from agentgrpo.agent.chat import build_system_prompt
from agentgrpo.agent.format import TOOL_CALL_CLOSE, TOOL_CALL_OPEN

END_OF_TEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS: tuple[str, ...] = (END_OF_TEXT, IM_START, IM_END)
TOOL_TOKENS: tuple[str, ...] = (TOOL_CALL_OPEN, TOOL_CALL_CLOSE)
_MIN_VOCAB = 256 + len(SPECIAL_TOKENS) + len(TOOL_TOKENS) + 1  # bytes + markers + one merge

CHATML_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- set content = message['content'] if message['content'] is string else '' -%}"
    "{%- if message['role'] == 'assistant' and message['tool_calls'] is defined"
    " and message['tool_calls'] -%}"
    "{%- set ns = namespace(parts=[]) -%}"
    "{%- if content | trim -%}{%- set ns.parts = ns.parts + [content | trim] -%}{%- endif -%}"
    "{%- for call in message['tool_calls'] -%}"
    "{%- set fn = call['function'] if call['function'] is defined else call -%}"
    "{%- set args = fn['arguments'] if fn['arguments'] is defined else {} -%}"
    "{%- set args_json = (args if args is string else (args | tojson))"
    " | replace('<tool_call>', '\\\\u003ctool_call>')"
    " | replace('</tool_call>', '\\\\u003c/tool_call>') -%}"
    "{%- set ns.parts = ns.parts + ['<tool_call>\\n{\"name\": ' + (fn['name'] | tojson)"
    " + ', \"arguments\": ' + args_json + '}\\n</tool_call>'] -%}"
    "{%- endfor -%}"
    "{%- set content = ns.parts | join('\\n') -%}"
    "{%- endif -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
"""ChatML. Assistant messages with OpenAI ``tool_calls`` (arguments as a dict, or as the
``json.dumps`` string of one) render as the same Hermes blocks ``render_assistant``
writes, so the template agrees with ``ChatFormat`` on OpenAI-style transcripts.
Schemas passed as ``tools=`` are ignored: ``ChatFormat`` puts them in the system message."""

_MARKERS = re.compile("|".join(re.escape(t) for t in SPECIAL_TOKENS + TOOL_TOKENS))

WORD_SPLIT_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?[\p{L}\p{N}_]+| ?[^\s\p{L}\p{N}_]+|\s+(?!\S)|\s+"""
"""The ``word`` split: GPT-2's, except that letters, digits and underscores form one word.
Identifiers (``get_user_details``, ``credit_card_9201427``, ``HAT011``) can then become single
tokens: transcripts get ~17% shorter and copying an id of the training world is one token,
which a few-million-parameter policy learns far more easily than a five-piece copy (but a
held-out world's ids are cut at arbitrary points: see ``ID_SPLIT_PATTERN``)."""

ID_SPLIT_PATTERN = (
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{Lu}?\p{Ll}+(?![\p{Ll}_\p{N}])|\p{Lu}?[\p{Ll}_]+|\p{Lu}|\p{N}"""
    r"""| ?[^\s\p{L}\p{N}_]+|\s+(?!\S)|\s+"""
)
"""The ``id`` split: GPT-2's, changed so that an id is the same tokens in every world and in
every context.

- A digit is a piece of its own, and so is a capital letter not followed by lower-case ones:
  ``0KEWFW`` is six pieces, ``HAT011`` six, ``Mia`` one.
- Lower-case letters and underscores form one word, so tool names, argument keys and enum
  values (``get_user_details``, ``basic_economy``) can still be single tokens.
- A word takes the space before it only when it is a plain word. A digit, a lone capital, or
  a word that runs on into an underscore or a digit (``sara_lee_2916``) never takes it.

So the user's "my id is sara_lee_2916" and the call's ``"user_id": "sara_lee_2916"`` hold the
same tokens, and a policy copies the id token for token. A tokenizer whose merges joined a
world's ids (its user names, its reservation codes) would give a policy trained there
one-token copies it cannot make in a new world."""


SPLIT_PATTERNS = {"word": WORD_SPLIT_PATTERN, "id": ID_SPLIT_PATTERN}
"""Pre-tokenizer splits by name (``data.tokenizer_split``). ``id`` goes with a corpus whose
identifiers are taken out (``domain_corpus(..., strip_identifiers=True)``)."""


def _pieces_without_markers(texts: Iterable[str]) -> Iterator[str]:
    """Split texts at the marker tokens, so BPE learns no merges across or inside them."""
    for text in texts:
        for piece in _MARKERS.split(text):
            if piece:
                yield piece


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int,
    *,
    min_frequency: int = 2,
    model_max_length: int = 16384,
    chat_template: str = CHATML_TEMPLATE,
    atomic_texts: Sequence[str] = (),
    split: str = "word",
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer of ``vocab_size`` tokens (fewer if the text runs out).

    Deterministic: the same texts give the same vocabulary and merges. The size includes
    the three special tokens and the two tool-call tokens, not ``atomic_texts``: strings
    added as one (non-special) token each, which encoding matches before anything else
    (longest first). The toy domain makes each whole tool call one token this way, so its
    policy's key decision is the first token of its turn.
    """
    if split not in SPLIT_PATTERNS:
        raise ValueError(f"split must be one of {sorted(SPLIT_PATTERNS)}, got {split!r}")
    if vocab_size < _MIN_VOCAB:
        raise ValueError(
            f"vocab_size must be at least {_MIN_VOCAB} (256 bytes + markers), got {vocab_size}"
        )
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERNS[split]), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TOOL_TOKENS),
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(_pieces_without_markers(texts), trainer=trainer)
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in (*TOOL_TOKENS, *atomic_texts)])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=END_OF_TEXT,
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = chat_template
    return tokenizer


def domain_corpus(
    domains: Any, extra_texts: Iterable[str] = (), max_records: int = 200, strip_identifiers: bool = False
) -> list[str]:
    """The text a domain tokenizer is trained on.

    ``domains`` is an ``AirlineDomain`` (``policy``, ``tool_schemas()``, ``tasks``,
    ``new_state()``, ``execute``) or a sequence of them (the training worlds). Records are
    printed by the domain's own read tools, so the tokenizer sees exactly the observations the
    policy will read; at most ``max_records`` per table over all worlds, spread evenly over each
    world's sorted keys (deterministic). ``strip_identifiers`` (with the ``id`` split): user,
    reservation and payment ids and e-mail addresses are deleted from every text, ``extra_texts``
    included, so no merge can be learned from one world's ids and ids of every world tokenize the
    same way (see ``ID_SPLIT_PATTERN``).
    """
    worlds = list(domains) if isinstance(domains, (list, tuple)) else [domains]
    first = worlds[0]
    schemas = first.tool_schemas()
    texts = [first.policy, build_system_prompt(first.policy, schemas)]
    texts += [json.dumps(schema, ensure_ascii=False) for schema in schemas]
    per_world = -(-max_records // len(worlds))
    identifiers: set[str] = set()
    for domain in worlds:
        state = domain.new_state()
        data = state.materialize()
        identifiers |= world_identifiers(data)
        for user_id in _spread(sorted(data["users"]), per_world):
            texts.append(domain.execute(state, "get_user_details", {"user_id": user_id}))
        for reservation_id in _spread(sorted(data["reservations"]), per_world):
            texts.append(
                domain.execute(state, "get_reservation_details", {"reservation_id": reservation_id})
            )
        searched = set()
        for number in _spread(sorted(data["flights"]), per_world):
            query = _bookable_search(data["flights"][number])
            if query is not None and query not in searched:
                searched.add(query)
                origin, destination, date = query
                query_args = {"origin": origin, "destination": destination, "date": date}
                texts.append(domain.execute(state, "search_direct_flight", query_args))
        texts += [task.instruction for task in domain.tasks]
    texts += list(extra_texts)
    if not strip_identifiers:
        return texts
    return [_without_identifiers(text, identifiers) for text in texts]


def world_identifiers(data: dict[str, Any]) -> set[str]:
    """A world's own identifiers: user, reservation and payment-method ids and e-mail addresses."""
    found = set(data["users"]) | set(data["reservations"])
    for user in data["users"].values():
        found |= set(user.get("payment_methods", {}))
        if user.get("email"):
            found.add(user["email"])
    return found


_WORDLIKE = re.compile(r"[\w@-]+(?:\.[\w@-]+)*")
"""A word, an id or an e-mail address: dots only inside (a sentence's full stop is not part of an id)."""


def _without_identifiers(text: str, identifiers: set[str]) -> str:
    return _WORDLIKE.sub(lambda m: "" if m.group() in identifiers else m.group(), text)


def _spread(keys: Sequence[str], limit: int) -> list[str]:
    """At most ``limit`` keys, evenly spaced over ``keys``."""
    if len(keys) <= limit:
        return list(keys)
    return [keys[i * len(keys) // limit] for i in range(limit)]


def _bookable_search(flight: dict[str, Any]) -> tuple[str, str, str] | None:
    """(origin, destination, date) of the flight's first date open for booking, if any."""
    dates = flight.get("dates", {})
    for date in sorted(dates):
        if dates[date].get("status") == "available":
            return flight["origin"], flight["destination"], date
    return None
