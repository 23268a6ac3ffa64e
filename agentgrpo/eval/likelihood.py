"""Which turns' likelihood a training run moved: two policies teacher-forced on the same episodes.

``agentgrpo eval --likelihood DIR --baseline BEFORE --policy AFTER`` reads the episodes of an
earlier evaluation (by default its successful ones: the correct actions whose likelihood
Lazy Likelihood Displacement says GRPO lowers), renders each as the policy sees it
(``policy_view``) and gets every assistant token's log-probability under both policies in
float32 (bfloat16 logits would add noise of the size of a few GRPO steps' change). Each
assistant turn is one of three kinds: a write call (a tool of the domain's ``write_tools``),
a read call (any other tool) or a reply. The report (``likelihood.json``, ``likelihood.md``
in ``--out``, by default DIR) gives per turn kind, for episodes that call a write tool and
for those that do not: the turns and tokens, the mean change of a turn's log-likelihood
(after − before, summed over its tokens) with a 95% interval over episodes (each episode's
mean over its turns of the kind, episodes resampled), the mean change per token, and the
share of turns whose likelihood fell. A separate row follows the first write call of each
episode: the decision GRPO's gradient on tasks that need no change pushes against.
"""
from __future__ import annotations

import json
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentgrpo.config import DataError
from agentgrpo.eval.stats import Estimate, bootstrap_mean

if TYPE_CHECKING:
    import torch

LIKELIHOOD_JSON = "likelihood.json"
LIKELIHOOD_MD = "likelihood.md"
TURN_KINDS = ("write", "read", "reply")
FIRST_WRITE = "first write call"


@dataclass
class TurnChange:
    """One assistant turn: its kind, tokens and log-likelihood under each policy."""

    kind: str
    tokens: int
    before: float
    after: float
    first_write: bool = False

    @property
    def delta(self) -> float:
        return self.after - self.before


@dataclass
class EpisodeChange:
    """One episode's assistant turns; ``writes``: it calls a write tool."""

    task_id: str
    family: str
    writes: bool
    turns: list[TurnChange] = field(default_factory=list)


def assistant_kinds(messages: Sequence[Mapping[str, Any]], write_tools: Collection[str]) -> list[str]:
    """Each assistant message's kind, in order: ``write``, ``read`` (a call to another tool) or ``reply``."""
    kinds = []
    for message in messages:
        if message["role"] != "assistant":
            continue
        calls = message.get("tool_calls") or []
        names = [call["function"]["name"] for call in calls]
        kinds.append("write" if any(n in write_tools for n in names) else "read" if names else "reply")
    return kinds


def turn_logprobs(model: Any, input_ids: list[int], spans: list[tuple[int, int]]) -> list[float]:
    """The summed log-probability of the tokens of each ``[start, end)`` span, teacher-forced in
    float32 by the training forward (``PolicyForward``: the vocabulary projected only at the spans)."""
    import torch

    from agentgrpo.policy.forward import PolicyForward

    ids = torch.tensor([input_ids])
    scored = torch.zeros_like(ids, dtype=torch.bool)
    for start, end in spans:
        scored[0, start:end] = True
    with torch.no_grad():
        token_lp = PolicyForward(model, autocast=False).token_logprobs(ids, torch.ones_like(ids), scored).logprobs[0]
    return [float(token_lp[start:end].sum()) for start, end in spans]


def episode_changes(records: Sequence[Any], chat: Any, before: torch.nn.Module, after: torch.nn.Module,
                    write_tools: Collection[str], max_length: int | None = None) -> tuple[list[EpisodeChange], int]:
    """Every record's turns under both policies; ``(episodes, skipped)`` (a transcript the template
    cannot mask turn by turn, or one whose turns and spans do not pair up, is skipped)."""
    from agentgrpo.agent.chat import policy_view
    from agentgrpo.agent.masking import build_sft_example

    episodes, skipped = [], 0
    for record in records:
        example = build_sft_example(chat, policy_view(chat, record.messages), max_length=max_length)
        kinds = assistant_kinds(record.messages, write_tools)
        spans = example.label_spans() if example is not None else []
        if example is None or len(spans) != len(kinds) or spans[0][0] == 0:
            skipped += 1
            continue
        lp_before = turn_logprobs(before, example.input_ids, spans)
        lp_after = turn_logprobs(after, example.input_ids, spans)
        episode = EpisodeChange(record.task_id, record.family, "write" in kinds)
        first_write = kinds.index("write") if "write" in kinds else -1
        for index, (kind, (start, end)) in enumerate(zip(kinds, spans)):
            episode.turns.append(TurnChange(kind, end - start, lp_before[index], lp_after[index],
                                            first_write=index == first_write))
        episodes.append(episode)
    return episodes, skipped


def summarise_changes(episodes: Sequence[EpisodeChange]) -> dict[str, Any]:
    """Per episode kind (``writes`` / ``no_writes`` / ``all``) and turn kind (``TURN_KINDS`` and
    ``FIRST_WRITE``): turns, tokens, the mean Δ of a turn's log-likelihood with its interval over
    episodes, Δ per token, and the share of turns whose likelihood fell."""
    groups = {"writes": [e for e in episodes if e.writes], "no_writes": [e for e in episodes if not e.writes],
              "all": list(episodes)}
    table: dict[str, Any] = {}
    for group, members in groups.items():
        rows = {}
        for kind in (*TURN_KINDS, FIRST_WRITE):
            per_episode, turns = [], []
            for episode in members:
                mine = [t for t in episode.turns if (t.first_write if kind == FIRST_WRITE else t.kind == kind)]
                if mine:
                    per_episode.append(statistics.fmean(t.delta for t in mine))
                    turns.extend(mine)
            if not turns:
                continue
            tokens = sum(t.tokens for t in turns)
            rows[kind] = {"episodes": len(per_episode), "turns": len(turns), "tokens": tokens,
                          "delta_per_turn": bootstrap_mean(per_episode).to_dict(),
                          "delta_per_token": sum(t.delta for t in turns) / tokens,
                          "fell_frac": sum(t.delta < 0 for t in turns) / len(turns),
                          "before_per_token": sum(t.before for t in turns) / tokens}
        table[group] = {"episodes": len(members), "kinds": rows}
    return table


def analyse_likelihood(eval_dir: str | Path, baseline: str, policy: str, *, out_dir: str | Path | None = None,
                       successful_only: bool = True, max_episodes: int | None = None) -> dict[str, Any]:
    """Teacher-force ``eval_dir``'s episodes under ``baseline`` and ``policy``; the report, also written
    as likelihood.json and likelihood.md to ``out_dir`` (default: ``eval_dir``)."""
    import torch

    from agentgrpo.agent.chat import ChatFormat
    from agentgrpo.config import ConfigError
    from agentgrpo.envs.registry import build_env, write_tools
    from agentgrpo.eval.runner import read_eval_dir
    from agentgrpo.policy.device import resolve_device
    from agentgrpo.policy.hf import load_policy, read_agent_config
    from agentgrpo.policy.source import resolve_policy_source

    config, records = read_eval_dir(eval_dir)
    tools = write_tools(config.env)
    if tools is None:
        raise DataError(f"{config.env.domain!r} declares no write_tools: nothing says which of its calls write")
    chosen = [r for r in records if r.messages and (r.reward == 1.0 or not successful_only)]
    if max_episodes is not None:
        chosen = chosen[:max_episodes]
    if not chosen:
        raise DataError(f"{eval_dir}: no {'successful ' if successful_only else ''}episode with messages to read")
    for source, key in ((baseline, "--baseline"), (policy, "--policy")):
        resolve_policy_source(source, key)  # a missing checkpoint is named before anything is read
    styles = {read_agent_config(p)["prompt_style"] for p in (baseline, policy)}
    if len(styles) > 1:
        raise ConfigError(f"--baseline and --policy render prompts differently ({sorted(styles)}): "
                          "their likelihoods of one transcript are not comparable")
    device = resolve_device(config.policy.device)
    before, tokenizer = load_policy(baseline, torch.float32, device=device)
    after, _ = load_policy(policy, torch.float32, device=device)
    domain = build_env(config.env).domain
    chat = ChatFormat(tokenizer, domain.tool_schemas(), domain.policy, prompt_style=styles.pop())
    episodes, skipped = episode_changes(chosen, chat, before, after, tools)
    report = {"eval_dir": str(eval_dir), "baseline": str(baseline), "policy": str(policy),
              "successful_only": successful_only, "episodes": len(episodes), "skipped": skipped,
              "table": summarise_changes(episodes)}
    out = Path(out_dir or eval_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / LIKELIHOOD_JSON).write_text(json.dumps(report, indent=2))
    (out / LIKELIHOOD_MD).write_text(likelihood_markdown(report))
    return report


def likelihood_markdown(report: Mapping[str, Any]) -> str:
    which = "successful episodes" if report["successful_only"] else "episodes"
    lines = [f"# Turn likelihoods: `{report['policy']}` against `{report['baseline']}`", "",
             f"{report['episodes']} {which} of `{report['eval_dir']}` ({report['skipped']} skipped), "
             "teacher-forced under both policies in float32. Δ = log-likelihood after − before, summed "
             "over a turn's tokens; its interval resamples episodes.", ""]
    titles = {"writes": "Episodes that call a write tool", "no_writes": "Episodes that call none",
              "all": "All episodes"}
    for group, title in titles.items():
        block = report["table"][group]
        lines += [f"## {title} ({block['episodes']})", "",
                  "| turn | episodes | turns | tokens | Δ per turn [95% CI] | Δ per token | turns fell | "
                  "log-lik. per token before |", "|---|---|---|---|---|---|---|---|"]
        for kind, row in block["kinds"].items():
            d = Estimate.from_dict(row["delta_per_turn"])
            lines.append(f"| {kind} | {row['episodes']} | {row['turns']} | {row['tokens']} | "
                         f"{d.value:+.4f} [{d.low:+.4f}, {d.high:+.4f}] | {row['delta_per_token']:+.5f} | "
                         f"{row['fell_frac']:.2f} | {row['before_per_token']:.4f} |")
        lines.append("")
    return "\n".join(lines)
