"""SFT's data side: the oracle's demonstrations, the examples rendered from them, and the
copy check's probes.

The teacher is the oracle agent talking to the scripted user (several episodes per task,
each with a differently seeded user, so the policy sees varied phrasing) in every world it
is given. A transcript is rendered through the policy's chat template as the policy sees it
(``agent.chat.policy_view``); only the assistant turns are labelled (``agentgrpo.agent.masking``).
"""
from __future__ import annotations

import random
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agentgrpo.agent.chat import ChatFormat, policy_view, tool_signatures
from agentgrpo.agent.format import openai_assistant_text
from agentgrpo.agent.masking import IGNORE_INDEX, SFTExample, assistant_span, build_sft_example
from agentgrpo.chat_content import content_text
from agentgrpo.config import ConfigError
from agentgrpo.envs.config import EnvConfig
from agentgrpo.envs.delex import IdKind, delexicalise_messages, renumber_slots
from agentgrpo.envs.episode import run_episode
from agentgrpo.envs.registry import (
    VALIDATION_SPLIT,
    EnvBundle,
    build_heldout,
    domain_oracle,
    id_kinds,
    make_env,
    write_tools,
)
from agentgrpo.envs.transcript import first_reply_index
from agentgrpo.openai_client import llm_user_client
from agentgrpo.train.copy_check import CopyProbe, copied_values, find_copy_spans
from agentgrpo.train.id_relabel import relabel_ids
from agentgrpo.train.recovery import (
    TOOL_FAULTS,
    RecoveringOracle,
    Slip,
    assistant_message_index,
    fault_call,
    fault_turn,
    is_recovery_of,
)
from agentgrpo.train.sft_config import SFTConfig, SFTTrainerConfig


@dataclass
class Demonstration:
    task_id: str
    user_seed: int
    reward: float
    messages: list[dict[str, Any]]
    untrained: tuple[int, ...] = ()
    """Indices in ``messages`` of assistant turns that are context only, left out of the loss (the
    wrong call of a recovery demonstration, ``agentgrpo.train.recovery``)."""
    fault: str | None = None
    """The fault a recovery demonstration was played with (``RECOVERY_FAULTS``); None: a plain one."""
    source: str = "oracle"
    """Who acted: ``oracle``, or ``policy`` for a trained policy's own successful episode
    (rejection-sampling fine-tuning, ``agentgrpo.train.rft``)."""


def collect_demonstrations(bundles: EnvBundle | list[EnvBundle], config: EnvConfig, splits: list[str],
                           per_task: int, seed: int, recovery_share: float = 0.0,
                           recovery_faults: Sequence[str] = TOOL_FAULTS,
                           slips: Callable[[Sequence[Mapping[str, Any]]], Slip] | None = None) -> list[Demonstration]:
    """Oracle transcripts with the scripted user on the ``splits`` tasks of every world in
    ``bundles``; failed episodes are dropped. With ``config.delexicalise`` the transcripts are
    as a delexicalising policy sees them (ids as slots). ``recovery_share`` (``data.recovery_share``):
    the share of them played again as recovery demonstrations with one of ``recovery_faults``
    (``agentgrpo.train.recovery``); the ``policy`` fault plays the slip ``slips`` finds in the
    plain transcript (``PolicySlips``)."""
    if "policy" in recovery_faults and recovery_share and slips is None:
        raise ValueError("the policy fault needs the policy's slips (slips=PolicySlips(...))")
    demos = []
    user_client = llm_user_client(config.user)  # None for the scripted user (the default)
    kinds = id_kinds(config) if config.delexicalise else None
    rng = random.Random(seed * 1_000_003 + 17)  # which demonstrations recover, from what: the seed's alone
    writes = (write_tools(config) or frozenset()) if recovery_share else frozenset()
    for bundle in bundles if isinstance(bundles, list) else [bundles]:
        signatures = tool_signatures(bundle.domain.tool_schemas()) if recovery_share else {}
        for task in bundle.tasks(splits):
            for k in range(per_task):
                user_seed = seed * 1000 + k
                # the oracle reads the real world; the transcript is then put in the policy's view
                env = make_env(bundle, task, config, user_seed=user_seed, user_client=user_client,
                               delexicalise=False)
                result = run_episode(env, domain_oracle(config, bundle, task))
                if result.reward != 1.0:
                    continue
                messages, untrained, fault = result.messages, (), None
                call = fault_call(result.actions, writes, rng) \
                    if recovery_share and rng.random() < recovery_share else None
                kind = rng.choice(recovery_faults) if call is not None else None
                given = None
                if kind == "policy" and slips is not None:  # where the policy itself first leaves this episode
                    slip = slips(result.messages)
                    turn, given = (slip.turn, slip.fault) if slip.fault is not None else (None, None)
                else:
                    turn = fault_turn(result.actions, call, kind) if call is not None and kind is not None else None
                if turn is not None and kind is not None:  # played again, with a wrong turn that changes nothing
                    agent = RecoveringOracle(domain_oracle(config, bundle, task), turn, kind, signatures, rng, given)
                    env = make_env(bundle, task, config, user_seed=user_seed, user_client=user_client,
                                   delexicalise=False)
                    replay = run_episode(env, agent)
                    index = assistant_message_index(replay.messages, turn) if agent.fault else -1
                    harmless = writes if kind == "policy" else None  # a policy's read may run
                    if replay.reward == 1.0 and agent.fault and is_recovery_of(replay.messages, index, result.messages,
                                                                               harmless):
                        messages, untrained, fault = replay.messages, (index,), agent.fault.kind
                if kinds:
                    messages = delexicalise_messages(messages, kinds)
                demos.append(Demonstration(task.task_id, user_seed, result.reward, messages, untrained, fault))
    return demos


def opening_demonstrations(bundles: EnvBundle | list[EnvBundle], config: EnvConfig, splits: list[str],
                           seed: int, tool_results: int = 1) -> list[Demonstration]:
    """``data.opening_splits``: one oracle demonstration of every task of ``splits``, cut as
    ``demonstration_openings`` cuts."""
    return demonstration_openings(collect_demonstrations(bundles, config, splits, 1, seed), tool_results)


def demonstration_openings(demos: Sequence[Demonstration], tool_results: int = 1) -> list[Demonstration]:
    """Each demonstration cut after its first message to the user after its ``tool_results``-th
    tool result (``first_reply_index``); one without it is cut after its first message to the user
    after the most tool results it has one after, and one with no message to the user after any
    tool result is left out."""
    if tool_results < 1:
        raise ValueError(f"tool_results must be >= 1, got {tool_results}")
    openings = []
    for demo in demos:
        for reads in range(tool_results, 0, -1):  # the deepest cut this demonstration has
            end = first_reply_index(demo.messages, reads)
            if end is not None:
                break
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


def tool_name_spans(chat: ChatFormat, example: SFTExample, messages: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """Token ranges in ``example`` (rendered from ``messages``) of its assistant calls' tool names,
    in order (found as ``find_copy_spans`` finds values)."""
    names = [call["function"]["name"] for message in messages if message.get("role") == "assistant"
             for call in message.get("tool_calls") or []]
    return find_copy_spans(example, [chat.encode(name) for name in names])


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


@dataclass(frozen=True)
class LabelWeights:
    """Loss weights of chosen labelled tokens (every other labelled token weighs 1; the loss is
    the weighted mean, so a weight shifts the gradient without changing its scale).

    ``copy`` (``trainer.copy_weight``): the tokens of every value an assistant call copies from its
    context (``copied_values``: ids, slots, dates), the ones a policy in a new world must get from
    its context rather than from what it learnt. ``tool_name`` (``trainer.tool_name_weight``): the
    tokens of every assistant call's tool name (``tool_name_spans``). ``opening`` (``trainer.opening_weight``): every
    assistant message up to and including the first reply after a tool result (the opening that
    ``demonstration_openings`` cuts: the first read, its reason, and the question after it).
    ``first_reply`` (``trainer.first_reply_weight``): that first reply alone. Where spans overlap,
    the later in this order wins: opening, copy, tool name, first reply."""
    copy: float = 1.0
    tool_name: float = 1.0
    first_reply: float = 1.0
    opening: float = 1.0

    @classmethod
    def of(cls, trainer: SFTTrainerConfig) -> LabelWeights:
        """The weights an SFT trainer config (``SFTConfig.trainer``) asks for."""
        return cls(copy=trainer.copy_weight, tool_name=trainer.tool_name_weight,
                   first_reply=trainer.first_reply_weight, opening=trainer.opening_weight)


def _weighted_spans(chat: ChatFormat, example: SFTExample, messages: list[dict[str, Any]],
                    view: list[dict[str, Any]], weights: LabelWeights) -> list[tuple[int, int, float]]:
    """``(start, end, weight)`` token ranges of ``example`` (rendered from ``view``, the policy's
    view of ``messages``) that ``weights`` weighs other than 1, in the order they apply."""
    spans: list[tuple[int, int, float]] = []
    reply = first_reply_index(view) if (weights.first_reply, weights.opening) != (1.0, 1.0) else None
    turns = {} if reply is None else {  # the opening's assistant turns, the first reply last
        index: span for index in (range(reply + 1) if weights.opening != 1.0 else (reply,))
        if view[index]["role"] == "assistant"
        and (span := assistant_span(chat, view, index, example.input_ids)) is not None}
    if weights.opening != 1.0:
        spans += [(*span, weights.opening) for span in turns.values()]
    if weights.copy != 1.0:
        spans += [(start, end, weights.copy) for start, end in copy_spans(chat, example, messages)]
    if weights.tool_name != 1.0:
        spans += [(start, end, weights.tool_name) for start, end in tool_name_spans(chat, example, messages)]
    if weights.first_reply != 1.0 and reply in turns:
        spans.append((*turns[reply], weights.first_reply))
    return spans


def _without_turns(chat: ChatFormat, example: SFTExample, messages: list[dict[str, Any]],
                   view: list[dict[str, Any]], untrained: Collection[int]) -> tuple[SFTExample, list[dict[str, Any]]]:
    """``example`` with the assistant turns ``untrained`` (indices in ``messages``) unlabelled, and
    ``messages`` with those turns emptied (so the values and names their calls hold are not looked
    for among the trained tokens)."""
    offset = len(view) - len(messages)  # policy_view puts its own system message first
    labels = list(example.labels)
    for index in sorted(i for i in untrained if 0 <= i < len(messages)):
        span = assistant_span(chat, view, index + offset, example.input_ids)
        if span is not None:
            labels[span[0]:span[1]] = [IGNORE_INDEX] * (span[1] - span[0])
    kept = [{"role": "assistant", "content": ""} if i in untrained else m for i, m in enumerate(messages)]
    return replace(example, labels=labels), kept


def training_examples(chat: ChatFormat, transcripts: Sequence[list[dict[str, Any]]], max_length: int,
                      weights: LabelWeights = LabelWeights(),
                      untrained: Sequence[Collection[int]] | None = None) -> tuple[list[SFTExample], int]:
    """SFT examples of recorded transcripts as the policy sees them: ``(examples, rejected)``;
    ``weights`` weighs chosen tokens in the loss (``LabelWeights``); ``untrained[i]``: the indices
    of transcript ``i``'s assistant turns left out of the loss (``Demonstration.untrained``)."""
    examples, rejected = [], 0
    for i, messages in enumerate(transcripts):
        view = policy_view(chat, messages)
        example = build_sft_example(chat, view, max_length=max_length)
        if example is None:
            rejected += 1
            continue
        if untrained is not None and untrained[i]:
            example, messages = _without_turns(chat, example, messages, view, untrained[i])
        spans = _weighted_spans(chat, example, messages, view, weights)
        if spans:  # else every labelled token weighs 1, which ``weights=None`` already says
            token_weights = [1.0] * len(example.labels)
            for start, end, weight in spans:
                token_weights[start:end] = [weight] * (end - start)
            example = replace(example, weights=token_weights)
        examples.append(example)
    return examples, rejected


def augmented_examples(chat: ChatFormat, demos: list[Demonstration], seed: int, epoch: int, max_length: int,
                       relabel: bool = True, slot_kinds: Sequence[IdKind] = (),
                       weights: LabelWeights = LabelWeights()) -> list[SFTExample]:
    """One epoch's examples with fresh ids (``data.relabel_ids``, when ``relabel``) and slots
    renumbered (``data.permute_slots``, the kinds in ``slot_kinds``): the draw depends on
    ``seed`` and ``epoch`` only, so a rerun trains on the same sequence of transcripts."""
    rng = random.Random(seed * 1_000_003 + epoch)
    transcripts = []
    for demo in demos:
        messages = relabel_ids(demo.messages, rng) if relabel else demo.messages
        transcripts.append(renumber_slots(messages, slot_kinds, rng) if slot_kinds else messages)
    return training_examples(chat, transcripts, max_length, weights, [d.untrained for d in demos])[0]
