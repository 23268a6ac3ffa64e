"""PRM-Lite: a 15-rule process reward with zero trainable parameters (DESIGN §4).

Input: an agent's steps (``agentgrpo.envs.types.Step``) or an OpenAI-style chat
transcript. Output (``PRMResult``): one score per step (step rules only, so the
trainer can credit turns), the fired rule ids, the trajectory-level adjustment
(P6, P8, B6) and ``process_score = clamp(mean(step_scores) + adjustment, -0.5, 0.5)``.
The training reward is ``outcome + 0.3 * process_score``.

Pure Python, no torch: it runs in the trainer's reward path and inside veRL/TRL
reward functions. Weights, limits, tool classes and schemas come from
``prm_lite.yaml`` (see ``agentgrpo.rewards.config``); the rules and our exact
reading of each are in docs/prm_lite.md.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgrpo.envs.types import Step
from agentgrpo.rewards.config import RULE_IDS, PRMLiteConfig
from agentgrpo.rewards.entities import Entity, EntityMatcher, occurs_as_token
from agentgrpo.rewards.messages import opening_messages, parse_messages
from agentgrpo.rewards.outcome import DEFAULT_PROCESS_COEF, combine_rewards

__all__ = ["PRMLite", "PRMLiteConfig", "PRMResult"]

_RULE_ORDER = {rule: i for i, rule in enumerate(RULE_IDS)}
_WORD_RE = re.compile(r"[a-z]+(?:'[a-z]+)?")


@dataclass
class PRMResult:
    """PRM-Lite's verdict on one trajectory.

    process_score: ``clamp(mean_step + trajectory_adjustment)``, in [-0.5, 0.5] by default.
    step_scores: per-step sums of step-rule weights (never trajectory rules).
    fired: every fired rule id in order, repeats kept: step rules step by step
        (in table order within a step), then trajectory rules.
    fired_per_step: the step rules of each step.
    trajectory_fired: the trajectory rules that fired (P8 once, however many steps over).
    trajectory_adjustment: sum of trajectory-rule contributions (P6 + P8·n + B6).
    mean_step: ``sum(step_scores)`` over the denominator ``step_mean_over`` names (by
        default the number of productive steps; with none, ``min(0, sum)``; 0.0 for an
        empty trajectory).
    """

    process_score: float
    step_scores: list[float]
    fired: list[str]
    fired_per_step: list[list[str]]
    trajectory_fired: list[str] = field(default_factory=list)
    trajectory_adjustment: float = 0.0
    mean_step: float = 0.0

    def reward(self, outcome: float, coef: float = DEFAULT_PROCESS_COEF) -> float:
        """``outcome + coef * process_score``."""
        return combine_rewards(outcome, self.process_score, coef)

    def rule_counts(self) -> dict[str, int]:
        """How many times each rule fired (every rule id present, zeros included)."""
        counts = Counter(self.fired)
        return {rule: counts.get(rule, 0) for rule in RULE_IDS}


@dataclass
class _Facts:
    """What the rules need to know about one step: the static part from ``_facts``,
    ``redundant``/``productive``/``think`` set during the walk (they depend on history)."""

    cls: str               # write/read/terminal/think/generic, or respond/invalid
    explicit_think: bool   # a call to a think-class tool
    errored: bool          # tool error or malformed generation
    signature: tuple[Any, ...]
    text_len: int
    output: str            # the stripped observation
    redundant: bool = False   # the same call with the same output as an earlier success
    productive: bool = False  # an action that neither errored nor was redundant
    think: bool = False       # not errored nor redundant: explicit think, or long text

    @property
    def unproductive(self) -> bool:
        """Errored or redundant: invisible to B5's neighbourhood and to the mean."""
        return self.errored or self.redundant


@dataclass
class _Walk:
    """State carried forward while scanning the steps in order."""

    visible: str                     # opening + informative observations of earlier turns
    results_seen: set[tuple[tuple[Any, ...], str]] = field(default_factory=set)  # (call, output)
    failed_calls: set[tuple[Any, ...]] = field(default_factory=set)  # signatures of calls that errored
    malformed_streak: bool = False   # a malformed turn and no productive action since
    pending_error: bool = False      # an action errored and no productive action followed yet
    read_succeeded: bool = False
    reads_used: set[str] = field(default_factory=set)
    confirmed: bool = False          # an explicit user "yes" since the last productive write


def assistant_text(step: Step) -> str:
    """The assistant's visible text for a step (for respond: the message itself)."""
    if step.kind != "respond":
        return step.text
    content = str(step.arguments.get("content", "") or "")
    if not content or content in step.text:
        return step.text
    return f"{step.text}\n{content}" if step.text else content


class PRMLite:
    """The rule engine. ``PRMLite()`` uses the packaged airline YAML.

    ``tool_classes`` (class -> tool names) replaces the config's classes, so another
    domain can reuse the airline weights with its own tools.
    """

    def __init__(self, config: PRMLiteConfig | None = None,
                 tool_classes: Mapping[str, Iterable[str]] | None = None) -> None:
        config = config if config is not None else PRMLiteConfig()
        if tool_classes is not None:
            config = dataclasses.replace(
                config, tool_classes={k: list(v) for k, v in tool_classes.items()})
        self.config = config
        self.weights = config.weights
        self._class_of = config.class_of_tool()
        self.entities = EntityMatcher(config.entity_schemas, config.placeholder_keywords,
                                      config.placeholder_patterns)
        self._confirm = [tuple(_WORD_RE.findall(p.lower())) for p in config.confirm_phrases]
        self._deny = frozenset(w.lower() for w in config.deny_words)
        self._longest_phrase = max((len(p) for p in self._confirm), default=0)

    @classmethod
    def from_yaml(cls, path: str | Path,
                  tool_classes: Mapping[str, Iterable[str]] | None = None) -> PRMLite:
        return cls(PRMLiteConfig.from_yaml(path), tool_classes=tool_classes)

    # ---- public API -------------------------------------------------------------

    def score_steps(self, steps: Sequence[Step], opening: Sequence[str] = ()) -> PRMResult:
        """Score a trajectory's steps. ``opening``: user messages before the first step
        (entities the user gave there count for the data chain)."""
        return self._score(list(steps), opening, list(range(len(steps))))

    def score_messages(self, messages: Any, foreign: bool = False) -> PRMResult:
        """Score an OpenAI-style transcript (or a τ-bench result with ``traj``).

        ``foreign``: another program wrote it, so tool errors are recognised by the tolerant
        rule (``agentgrpo.rewards.messages.parse_messages``); our own transcripts read back as
        exactly their recorded steps and score as ``score_steps`` on those.
        """
        conversation = parse_messages(messages, foreign)
        return self._score(conversation.steps, conversation.opening, conversation.turn_of_step)

    def score_trajectory(self, trajectory: Any) -> PRMResult:
        """Score a rollout ``Trajectory``: its ``steps`` (1:1 with its turns, with the
        rollout's own error flags) and the opening user messages of its transcript. The
        same as ``score_messages(trajectory.transcript)``, which reads back as these steps."""
        opening = opening_messages(trajectory.messages) if trajectory.messages else []
        return self.score_steps(trajectory.steps, opening)

    def is_confirmation(self, reply: str) -> bool:
        """An explicit yes: an affirmative phrase as whole words within the first
        ``confirm_window_words`` words, with no negative word before it."""
        window = self.config.confirm_window_words
        found = _WORD_RE.finditer(reply.lower().replace("\u2019", "'"))
        words = [m.group(0) for m in itertools.islice(found, window + self._longest_phrase)]
        for start in range(min(window, len(words))):
            for phrase in self._confirm:
                if phrase and tuple(words[start:start + len(phrase)]) == phrase:
                    return not any(w in self._deny for w in words[:start])
        return False

    # ---- engine -----------------------------------------------------------------

    def _facts(self, step: Step) -> _Facts:
        if step.kind == "tool":
            cls = self._class_of.get(step.name, "generic")
            signature: tuple[Any, ...] = (
                "tool", step.name,
                json.dumps(step.arguments, sort_keys=True, ensure_ascii=False, default=str))
        elif step.kind == "respond":
            cls, signature = "respond", ("respond", str(step.arguments.get("content", "")))
        else:
            cls, signature = "invalid", ("invalid",)
        text_len = len(assistant_text(step).strip())
        # the step's own record decides (the environment's rule, applied when the turn was
        # played or the transcript read); a malformed turn is an error whatever its flag
        errored = step.error or step.kind == "invalid"
        return _Facts(cls, cls == "think", errored, signature, text_len,
                      (step.observation or "").strip())

    def _classify(self, step: Step, fact: _Facts, walk: _Walk) -> None:
        """Set the history-dependent facts. A successful call is redundant when the
        trajectory already had the same call (name and arguments) with the same output:
        it told nothing new and changed nothing."""
        if step.kind == "tool" and not fact.explicit_think and not fact.errored:
            fact.redundant = (fact.signature, fact.output) in walk.results_seen
        fact.productive = not (fact.explicit_think or fact.unproductive)
        fact.think = not fact.unproductive and (
            fact.explicit_think or fact.text_len > self.config.think_text_chars)

    def _score(self, steps: list[Step], opening: Sequence[str],
               turn_of_step: Sequence[int]) -> PRMResult:
        facts = [self._facts(s) for s in steps]
        walk = _Walk(visible="\n".join(opening))
        fired: list[list[str]] = []
        fresh: list[str] = []  # informative outputs of the current turn, not yet visible to it
        for i, (step, fact) in enumerate(zip(steps, facts)):
            if i > 0 and turn_of_step[i] != turn_of_step[i - 1]:
                walk.visible = "\n".join([walk.visible, *fresh])
                fresh = []
            self._classify(step, fact, walk)
            fired.append(self._step_rules(step, fact, walk))
            if step.observation and not fact.unproductive:  # an error message is no data
                fresh.append(step.observation)
            self._advance(step, fact, walk)
        self._think_bonus(facts, fired)
        for rules in fired:
            rules.sort(key=_RULE_ORDER.__getitem__)
        step_scores = [sum(self.weights[r] for r in rules) for rules in fired]
        trajectory_fired, adjustment = self._trajectory_rules(facts, walk)
        mean_step = self._mean_step(step_scores, facts)
        lo, hi = self.config.process_clamp
        return PRMResult(
            process_score=min(hi, max(lo, mean_step + adjustment)),
            step_scores=step_scores,
            fired=[r for rules in fired for r in rules] + trajectory_fired,
            fired_per_step=fired,
            trajectory_fired=trajectory_fired,
            trajectory_adjustment=adjustment,
            mean_step=mean_step,
        )

    def _mean_step(self, step_scores: list[float], facts: list[_Facts]) -> float:
        if not step_scores:
            return 0.0
        over = self.config.step_mean_over
        if over == "productive":
            # unproductive steps add their (non-positive) scores but never the denominator,
            # so padding cannot dilute; with no productive step only the penalties count
            productive = sum(1 for f in facts if f.productive)
            total = sum(step_scores)
            return total / productive if productive else min(0.0, total)
        count = len(step_scores)
        if over == "actions":
            count = sum(1 for f in facts if not f.explicit_think)
            if count == 0:  # only think calls: no action to average over, and no bonus for thinking alone
                return 0.0
        return sum(step_scores) / count

    def _step_rules(self, step: Step, fact: _Facts, walk: _Walk) -> list[str]:
        """Step rules except B5 (which needs the following steps). Bonuses fire only on
        productive steps."""
        rules: list[str] = []
        is_call = step.kind == "tool" and not fact.explicit_think
        report = self.entities.inspect_arguments(step.arguments) if is_call else None
        if report is not None and report.bad:
            rules.append("P1" if fact.cls == "write" else "P2")
        if fact.redundant:
            rules.append("P3")
        if self._repeats_an_error(fact, walk):
            rules.append("P4")
        if fact.cls == "terminal" and not walk.read_succeeded:
            rules.append("P5")
        if not fact.think and fact.text_len < self.config.terse_text_chars:
            rules.append("P7")
        if fact.errored:
            rules.append("P9")
        if not fact.productive:
            return rules
        if walk.pending_error and "P4" not in rules and not any(
                r in self.config.recovery_blocked_by for r in rules):
            rules.append("B1")
        if report is not None and fact.cls in ("read", "write") and self._chains(
                report.entities, rules, walk.visible):
            rules.append("B2" if fact.cls == "write" else "B3")
        if fact.cls == "read" and step.name not in walk.reads_used:
            rules.append("B4")
        if fact.cls == "write" and walk.confirmed:
            rules.append("B7")
        return rules

    @staticmethod
    def _repeats_an_error(fact: _Facts, walk: _Walk) -> bool:
        """P4: a call identical to an earlier call that errored (anywhere before), or a
        malformed generation while an earlier one is still unanswered by a productive action.
        Malformed turns have no call to compare, so only a streak of them is a repetition;
        unproductive steps never end the streak, so inserting them cannot lift a P4."""
        if fact.cls == "invalid":
            return walk.malformed_streak
        return not fact.explicit_think and fact.signature in walk.failed_calls

    def _chains(self, entities: list[Entity], rules: list[str], visible: str) -> bool:
        """Data chain: a well-formed argument entity occurs as a whole token in an
        observation the policy had already seen (never in its own text)."""
        if not visible or any(r in self.config.chain_blocked_by for r in rules):
            return False
        return any(occurs_as_token(value, visible) for _, value in entities)

    def _advance(self, step: Step, fact: _Facts, walk: _Walk) -> None:
        """Update the carried state after a step has been scored. Unproductive steps
        change nothing a later bonus depends on (only the error state and P4's record)."""
        if fact.errored:
            if fact.cls == "invalid":
                walk.malformed_streak = True
            elif not fact.explicit_think:
                walk.failed_calls.add(fact.signature)
            if not fact.explicit_think:
                walk.pending_error = True
            return
        if step.kind == "tool" and not fact.explicit_think:
            walk.results_seen.add((fact.signature, fact.output))
        if not fact.productive:
            return
        walk.pending_error = False
        walk.malformed_streak = False
        if fact.cls == "read":
            walk.read_succeeded = True
            walk.reads_used.add(step.name)
        if fact.cls == "write":
            walk.confirmed = False
        if step.kind == "respond" and self.is_confirmation(step.observation):
            walk.confirmed = True

    def _think_bonus(self, facts: list[_Facts], fired: list[list[str]]) -> None:
        """B5: a think step whose previous step is no think, which is not last, and whose
        follow-through (the steps up to and including the next productive-or-think one)
        fires no P1/P2/P3; capped per trajectory. Errored and redundant steps are skipped
        when looking for neighbours, so inserting one never makes a think eligible."""
        weight, cap = self.weights["B5"], self.config.think_bonus_cap
        total = 0.0
        previous_think = False  # whether the last step that is not unproductive was a think
        for i, fact in enumerate(facts):
            if fact.unproductive:
                continue
            eligible, previous_think = fact.think and not previous_think, fact.think
            if not eligible:
                continue
            nxt = next((j for j in range(i + 1, len(facts)) if not facts[j].unproductive), None)
            if nxt is None or any(r in ("P1", "P2", "P3")
                                  for rules in fired[i + 1:nxt + 1] for r in rules):
                continue
            if total + weight > cap + 1e-12:
                break
            fired[i].append("B5")
            total += weight

    def _trajectory_rules(self, facts: list[_Facts], walk: _Walk) -> tuple[list[str], float]:
        cfg, fired, adjustment = self.config, [], 0.0
        if len(facts) >= cfg.no_reasoning_min_steps and not any(f.think for f in facts):
            fired.append("P6")
            adjustment += self.weights["P6"]
        tool_steps = sum(1 for f in facts if f.cls not in ("respond", "invalid")
                         and (cfg.overlong_counts_think or not f.explicit_think))
        extra = max(0, tool_steps - cfg.free_tool_steps)
        if extra:
            fired.append("P8")
            adjustment += self.weights["P8"] * extra
        if len(walk.reads_used) >= cfg.exploration_min_read_tools:
            fired.append("B6")
            adjustment += self.weights["B6"]
        return fired, adjustment
