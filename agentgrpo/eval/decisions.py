"""Teacher-forced decisions: the policy's next turn at each assistant turn of the oracle's episodes.

An evaluation plays whole episodes, so one early slip takes the rest off the path the policy
was trained on, and a failed write task does not say whether the policy could not choose the
write or never got there. ``agentgrpo eval --decisions`` separates the two. On the evaluated
tasks (the same ``splits``, ``tasks_per_family``, ``heldout_seed``) it plays the oracle with
the scripted user, shows the policy each prefix of that conversation ending before an assistant
turn (as the policy sees it: its system prompt, ids as slots when it was trained so), decodes
the policy's turn greedily (under ``rollout.constrain_tool_calls`` / ``copy_arguments`` when set)
and compares it with the oracle's. Per turn kind (read call, write call, message):

- **kind**: a call where the oracle calls, a message where it writes one;
- **tool**: the oracle's tool (calls); **exact**: the tool and every argument equal.

Per tool: the turns, right tool, exact calls, well-formed calls, and which arguments differ
when the tool is right; the most common confusions (oracle's tool → policy's). The report is
``decisions.json`` and ``decisions.md`` in ``out_dir``.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgrpo.agent.format import ParsedAction

DECISIONS_JSON, DECISIONS_MD = "decisions.json", "decisions.md"
KINDS = ("read", "write", "respond")


@dataclass
class Decision:
    """One assistant turn of an oracle episode: what the oracle did and what the policy did."""

    task_id: str
    family: str
    turn: int
    """The turn's index among the episode's messages (system prompt = 0)."""
    gold: ParsedAction
    got: ParsedAction


def turn_kind(action: ParsedAction, write_tools: set[str]) -> str:
    if action.kind == "tool":
        return "write" if action.name in write_tools else "read"
    return action.kind


@dataclass
class DecisionReport:
    """Counts over the decisions (``summarise``)."""

    prefixes: int = 0
    episodes: int = 0
    oracle_failed: int = 0
    by_kind: dict[str, dict[str, int]] = field(default_factory=dict)
    by_tool: dict[str, dict[str, int]] = field(default_factory=dict)
    confusions: list[tuple[str, str, int]] = field(default_factory=list)
    examples: list[dict[str, Any]] = field(default_factory=list)

    def accuracy(self, kind: str, what: str) -> float:
        counts = self.by_kind.get(kind, {})
        return counts.get(what, 0) / counts["turns"] if counts.get("turns") else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {"prefixes": self.prefixes, "episodes": self.episodes, "oracle_failed": self.oracle_failed,
                "by_kind": self.by_kind, "accuracy": {kind: {what: self.accuracy(kind, what)
                                                             for what in ("kind", "tool", "exact")}
                                                      for kind in KINDS if kind in self.by_kind},
                "by_tool": self.by_tool, "confusions": [list(c) for c in self.confusions],
                "examples": self.examples}


def summarise(decisions: list[Decision], write_tools: set[str], episodes: int = 0, oracle_failed: int = 0,
              max_examples: int = 3) -> DecisionReport:
    """Count kind / tool / exact matches per turn kind and per tool (see the module docstring)."""
    report = DecisionReport(prefixes=len(decisions), episodes=episodes, oracle_failed=oracle_failed)
    confusions: Counter[tuple[str, str]] = Counter()
    shown: Counter[str] = Counter()
    for d in decisions:
        kind = turn_kind(d.gold, write_tools)
        counts = report.by_kind.setdefault(kind, {"turns": 0, "kind": 0, "tool": 0, "exact": 0})
        same_kind = d.got.kind == d.gold.kind
        same_tool = same_kind and d.got.name == d.gold.name
        counts["turns"] += 1
        counts["kind"] += same_kind
        counts["tool"] += same_tool
        counts["exact"] += same_tool and d.gold.kind == "tool" and d.got.arguments == d.gold.arguments
        if d.gold.kind != "tool":
            continue
        tool = report.by_tool.setdefault(d.gold.name, {"turns": 0, "tool": 0, "exact": 0, "well_formed": 0})
        tool["turns"] += 1
        tool["tool"] += same_tool
        tool["well_formed"] += d.got.kind == "tool"
        if not same_tool:
            confusions[(d.gold.name, d.got.name)] += 1
            continue
        if d.got.arguments == d.gold.arguments:
            tool["exact"] += 1
            continue
        for key in sorted(set(d.gold.arguments) | set(d.got.arguments)):
            if d.gold.arguments.get(key) != d.got.arguments.get(key):
                tool[f"wrong {key}"] = tool.get(f"wrong {key}", 0) + 1
        if shown[d.gold.name] < max_examples:
            shown[d.gold.name] += 1
            report.examples.append({"task_id": d.task_id, "turn": d.turn, "tool": d.gold.name,
                                    "oracle": d.gold.arguments, "policy": d.got.arguments})
    report.confusions = [(gold, got, n) for (gold, got), n in confusions.most_common(12)]
    return report


def decisions_markdown(report: DecisionReport, policy: str) -> str:
    lines = [f"# Teacher-forced decisions: `{policy}`", "",
             f"{report.prefixes} assistant turns of {report.episodes} oracle episodes "
             f"({report.oracle_failed} tasks the oracle failed are left out). Each turn is decoded greedily "
             "after the oracle's conversation so far.", "",
             "| turn kind | turns | kind | tool | exact |", "|---|---|---|---|---|"]
    for kind in KINDS:
        if kind in report.by_kind:
            counts = report.by_kind[kind]
            exact = "–" if kind == "respond" else f"{report.accuracy(kind, 'exact'):.3f}"
            tool = "–" if kind == "respond" else f"{report.accuracy(kind, 'tool'):.3f}"
            lines.append(f"| {kind} | {counts['turns']} | {report.accuracy(kind, 'kind'):.3f} | {tool} | {exact} |")
    lines += ["", "## Per tool", "",
              "| tool | turns | right tool | exact | well-formed | arguments wrong (right tool) |",
              "|---|---|---|---|---|---|"]
    for name, counts in sorted(report.by_tool.items()):
        wrong = "; ".join(f"{key[6:]} {n}" for key, n in sorted(counts.items(), key=lambda kv: -kv[1])
                          if key.startswith("wrong ")) or "-"
        lines.append(f"| {name} | {counts['turns']} | {counts['tool']} | {counts['exact']} | {counts['well_formed']} "
                     f"| {wrong} |")
    if report.confusions:
        lines += ["", "Confusions (oracle's tool → the policy's turn): "
                  + "; ".join(f"{gold} → {got} ({n})" for gold, got, n in report.confusions) + "."]
    if report.examples:
        lines += ["", "## Examples of wrong arguments", ""]
        lines += [f"- `{e['tool']}` ({e['task_id']}, turn {e['turn']}): oracle `{json.dumps(e['oracle'])}`, "
                  f"policy `{json.dumps(e['policy'])}`" for e in report.examples]
    return "\n".join(lines) + "\n"


def run_decisions(config: Any, batch_size: int = 16) -> DecisionReport:
    """Play the oracle on ``config``'s tasks, decode the policy at every assistant turn, write the report."""
    import torch

    from agentgrpo.agent.chat import policy_view
    from agentgrpo.envs.delex import delexicalise_messages
    from agentgrpo.envs.episode import run_episode
    from agentgrpo.envs.registry import domain_oracle, id_kinds, make_env, write_tools
    from agentgrpo.eval.tasks import eval_tasks
    from agentgrpo.policy.device import resolve_device
    from agentgrpo.policy.generate import generate_batch
    from agentgrpo.policy.hf import load_agent, resolve_view
    from agentgrpo.rollout.engine import copy_kinds

    tasks = eval_tasks(config)
    device = resolve_device(config.policy.device)
    domain = tasks[0].bundle.domain
    model, chat = load_agent(config.policy.init, domain.tool_schemas(), domain.policy,
                             getattr(torch, config.policy.dtype), device)
    rollout = config.rollout
    policy_env = resolve_view(config.env, config.policy.init)  # the policy's view of ids
    grammar = (chat.grammar(model.config.vocab_size, copy_values=rollout.copy_arguments,
                            value_kinds=copy_kinds(rollout, policy_env), evidence_only=rollout.copy_from_evidence)
               if rollout.constrain_tool_calls else None)
    kinds = id_kinds(policy_env) if policy_env.delexicalise else None
    prompts: list[tuple[list[int], Decision]] = []
    episodes = oracle_failed = 0
    for job in tasks:
        env = make_env(job.bundle, job.task, config.env, user_seed=config.seed, delexicalise=False)
        result = run_episode(env, domain_oracle(config.env, job.bundle, job.task))
        if result.reward != 1.0:
            oracle_failed += 1
            continue
        episodes += 1
        messages = delexicalise_messages(result.messages, kinds) if kinds else result.messages
        view = policy_view(chat, messages)
        for index, message in enumerate(view):
            if message["role"] == "assistant":
                gold = chat.parse(message["content"])
                prompts.append((chat.encode_prompt(view[:index]),
                                Decision(job.task.task_id, job.task.family, index, gold, gold)))
    prompts.sort(key=lambda item: len(item[0]))  # similar lengths batch with little padding
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        requests = [_request(prompt, chat.eos_token_ids, rollout.max_new_tokens, grammar) for prompt, _ in chunk]
        outputs = generate_batch(model, requests, chat.pad_token_id, use_autocast=config.policy.autocast_devices)
        for (_, decision), output in zip(chunk, outputs):
            decision.got = chat.parse(chat.decode(output.tokens))
    report = summarise([d for _, d in prompts], set(write_tools(config.env)), episodes, oracle_failed)
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / DECISIONS_JSON).write_text(json.dumps({"policy": str(config.policy.init), **report.to_dict()}, indent=2))
    (out / DECISIONS_MD).write_text(decisions_markdown(report, str(config.policy.init)))
    return report


def _request(prompt: list[int], eos_ids: list[int], max_new_tokens: int, grammar: Any):
    """A greedy request; with a grammar, its logits restricted and its matcher advanced token by token."""
    from agentgrpo.policy.generate import GenerationRequest
    from agentgrpo.rollout.sampling import restrict_to_grammar

    if grammar is None:
        return GenerationRequest(prompt, max_new_tokens, list(eos_ids), temperature=0.0)
    matcher = grammar.matcher(prompt)

    def advance(tokens: list[int]) -> bool:
        grammar.advance(matcher, tokens[-1])
        return False

    return GenerationRequest(prompt, max_new_tokens, list(eos_ids), temperature=0.0, on_token=advance,
                             logits_filter=lambda logits: restrict_to_grammar(logits[None], grammar, [matcher])[0])
