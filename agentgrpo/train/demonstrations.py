"""SFT's data side: the oracle's demonstrations, the examples rendered from them, and the
copy check's probes.

The teacher is the oracle agent talking to the scripted user (several episodes per task,
each with a differently seeded user, so the policy sees varied phrasing) in every world it
is given. A transcript is rendered through the policy's chat template as the policy sees it
(``agent.chat.policy_view``); only the assistant turns are labelled (``agentgrpo.agent.masking``).
"""
from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from agentgrpo.agent.chat import ChatFormat, policy_view
from agentgrpo.agent.format import openai_assistant_text
from agentgrpo.agent.masking import SFTExample, assistant_span, build_sft_example
from agentgrpo.chat_content import content_text
from agentgrpo.config import ConfigError
from agentgrpo.envs.config import EnvConfig
from agentgrpo.envs.delex import IdKind, delexicalise_messages, renumber_slots
from agentgrpo.envs.episode import run_episode
from agentgrpo.envs.registry import VALIDATION_SPLIT, EnvBundle, build_heldout, domain_oracle, id_kinds, make_env
from agentgrpo.envs.transcript import first_reply_index
from agentgrpo.openai_client import llm_user_client
from agentgrpo.train.copy_check import CopyProbe, copied_values, find_copy_spans
from agentgrpo.train.id_relabel import relabel_ids
from agentgrpo.train.sft_config import SFTConfig


@dataclass
class Demonstration:
    task_id: str
    user_seed: int
    reward: float
    messages: list[dict[str, Any]]


def collect_demonstrations(bundles: EnvBundle | list[EnvBundle], config: EnvConfig, splits: list[str],
                           per_task: int, seed: int) -> list[Demonstration]:
    """Oracle transcripts with the scripted user on the ``splits`` tasks of every world in
    ``bundles``; failed episodes are dropped. With ``config.delexicalise`` the transcripts are
    as a delexicalising policy sees them (ids as slots)."""
    demos = []
    user_client = llm_user_client(config.user)  # None for the scripted user (the default)
    kinds = id_kinds(config) if config.delexicalise else None
    for bundle in bundles if isinstance(bundles, list) else [bundles]:
        for task in bundle.tasks(splits):
            for k in range(per_task):
                user_seed = seed * 1000 + k
                # the oracle reads the real world; the transcript is then put in the policy's view
                env = make_env(bundle, task, config, user_seed=user_seed, user_client=user_client,
                               delexicalise=False)
                result = run_episode(env, domain_oracle(config, bundle, task))
                if result.reward == 1.0:
                    messages = delexicalise_messages(result.messages, kinds) if kinds else result.messages
                    demos.append(Demonstration(task.task_id, user_seed, result.reward, messages))
    return demos


def opening_demonstrations(bundles: EnvBundle | list[EnvBundle], config: EnvConfig, splits: list[str],
                           seed: int) -> list[Demonstration]:
    """``data.opening_splits``: one oracle demonstration of every task of ``splits``, cut after its
    first message to the user after its first tool result (``first_reply_index``); a transcript
    without one is left out."""
    return demonstration_openings(collect_demonstrations(bundles, config, splits, 1, seed))


def demonstration_openings(demos: Sequence[Demonstration]) -> list[Demonstration]:
    """Each demonstration cut after its first message to the user after its first tool result
    (``first_reply_index``); one without such a message is left out."""
    openings = []
    for demo in demos:
        end = first_reply_index(demo.messages)
        if end is not None:
            openings.append(replace(demo, messages=demo.messages[: end + 1]))
    return openings


def transcript_text(messages: list[dict[str, Any]]) -> str:
    """Plain text of a transcript as the policy sees it (tokenizer training corpus)."""
    return "\n".join(
        openai_assistant_text(m) if m["role"] == "assistant" else content_text(m.get("content"))
        for m in messages
        if m["role"] != "system"
    )


def copy_spans(chat: ChatFormat, example: SFTExample, messages: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """Token ranges in ``example`` (rendered from ``messages``) of the values its assistant calls
    copy from their context (``copied_values``, found by ``find_copy_spans``)."""
    return find_copy_spans(example, [chat.encode(v) for v in copied_values(messages)])


def copy_probes(config: SFTConfig, bundle: EnvBundle, chat: ChatFormat,
                renumber: random.Random | None = None) -> tuple[list[CopyProbe], str | None]:
    """The copy check's probes: one oracle demonstration of each of ``data.copy_check_tasks``
    validation tasks from held-out worlds (never a training or test world). Returns
    ``(probes, None)``, or ``([], reason)`` when the check is off or the domain cannot draw them.

    ``renumber`` (delexicalised views only): renumber each demonstration's slots with this
    generator (``renumber_slots``). In order of first appearance the user is always ``<U1>`` and
    the first reservation ``<R1>``, so a policy scores there by writing the usual slot; with the
    slots renumbered only a policy that copies from its context does."""
    if config.data.copy_check_tasks == 0:
        return [], "off (data.copy_check_tasks=0)"
    try:
        worlds = build_heldout(config.env, [VALIDATION_SPLIT], config.data.copy_check_tasks, training=bundle)
    except ConfigError as e:
        return [], f"unavailable: {e}"
    demos = collect_demonstrations(worlds, config.env, [VALIDATION_SPLIT], per_task=1, seed=config.seed + 1)
    if renumber is not None:
        if not config.env.delexicalise:
            raise ConfigError("renumbered copy probes need a delexicalised view (env.delexicalise=true)")
        kinds = id_kinds(config.env)
        demos = [replace(d, messages=renumber_slots(d.messages, kinds, renumber)) for d in demos]
    probes = []
    for demo in demos:  # one example per demonstration: a rejected one must not shift the pairing
        example = build_sft_example(chat, policy_view(chat, demo.messages), max_length=config.data.max_length)
        if example is not None:
            probes.append(CopyProbe(example.input_ids, copy_spans(chat, example, demo.messages)))
    return probes, None


def training_examples(chat: ChatFormat, transcripts: Sequence[list[dict[str, Any]]], max_length: int,
                      copy_weight: float = 1.0, first_reply_weight: float = 1.0) -> tuple[list[SFTExample], int]:
    """SFT examples of recorded transcripts as the policy sees them: ``(examples, rejected)``.

    ``copy_weight`` (``trainer.copy_weight``) is the loss weight of the tokens of every value an
    assistant call copies from its context (``copied_values``: ids, slots, dates), 1 for the rest:
    they are a small share of the labelled tokens, and the ones a policy in a new world must
    get from its context rather than from what it learnt. ``first_reply_weight``
    (``trainer.first_reply_weight``) weighs the tokens of the first reply after a tool result."""
    examples, rejected = [], 0
    for messages in transcripts:
        view = policy_view(chat, messages)
        example = build_sft_example(chat, view, max_length=max_length)
        if example is None:
            rejected += 1
            continue
        spans: list[tuple[int, int, float]] = []
        if copy_weight != 1.0:
            spans += [(start, end, copy_weight) for start, end in copy_spans(chat, example, messages)]
        reply = first_reply_index(view) if first_reply_weight != 1.0 else None
        reply_span = None if reply is None else assistant_span(chat, view, reply, example.input_ids)
        if reply_span is not None:
            spans.append((*reply_span, first_reply_weight))
        if spans:  # else every labelled token weighs 1, which ``weights=None`` already says
            weights = [1.0] * len(example.labels)
            for start, end, weight in spans:
                weights[start:end] = [weight] * (end - start)
            example = replace(example, weights=weights)
        examples.append(example)
    return examples, rejected


def augmented_examples(chat: ChatFormat, demos: list[Demonstration], seed: int, epoch: int, max_length: int,
                       relabel: bool = True, slot_kinds: Sequence[IdKind] = (),
                       copy_weight: float = 1.0, first_reply_weight: float = 1.0) -> list[SFTExample]:
    """One epoch's examples with fresh ids (``data.relabel_ids``, when ``relabel``) and slots
    renumbered (``data.permute_slots``, the kinds in ``slot_kinds``): the draw depends on
    ``seed`` and ``epoch`` only, so a rerun trains on the same sequence of transcripts."""
    rng = random.Random(seed * 1_000_003 + epoch)
    transcripts = []
    for demo in demos:
        messages = relabel_ids(demo.messages, rng) if relabel else demo.messages
        transcripts.append(renumber_slots(messages, slot_kinds, rng) if slot_kinds else messages)
    return training_examples(chat, transcripts, max_length, copy_weight, first_reply_weight)[0]
