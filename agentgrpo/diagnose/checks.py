"""The checks of ``agentgrpo diagnose``: each reads a ``RunLog`` (a run's per-step records) and
returns a ``Finding`` (the step its signature began, one line of evidence), ``None``, or raises
``NotApplicable``. Thresholds are named constants; docs/diagnostics.md explains each."""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentgrpo import metric_names as metric
from agentgrpo.diagnose.read import NotApplicable, RunLog, Series, eval_pass1, find_eval, first_run, series, smooth

# ---- thresholds (why each value: docs/diagnostics.md has the longer story) -------------------
BASELINE_STEPS = 3
"""A run's "start" is the median of its first 3 steps: one unlucky first batch does not set it."""
PERSIST_STEPS = 2
"""A level check fires when its (smoothed) condition holds this many steps in a row."""
SATURATION_FRAC = 0.75
"""Group saturation: 3 groups in 4 (or more) with one outcome for all their episodes …"""
SATURATION_STEPS = 3
"""… for 3 steps in a row (a single saturated batch is common with 4 tasks × G = 8)."""
LLD_STEPS = 3
"""LLD phase 1 (K): the A ≥ 0 rows' log-prob change is negative 3 steps in a row, a sustained
decline rather than one step's (the change is exact, so its sign is never padding noise)."""
ENTROPY_RISE = 0.25
"""LLD phase 2: the entropy's rolling median 25% above its value when phase 1 began."""
GRAD_SPIKE = 3.0
"""LLD phase 3: a gradient norm 3× the median of all earlier steps (the milder bar of the two
gradient rules: it only counts after phases 1 and 2)."""
ENTROPY_FRACTION = 0.25
"""Entropy collapse: the entropy's rolling median at or below a quarter of its start (a
policy that learns sharpens gradually; a quarter within a run is a collapse, DAPO's
motivation for clip-higher)."""
FORMAT_RISE = 0.20
"""Format collapse: malformed-turn rate 0.20 above its start, one turn in five more; at ~100
turns a step its noise is ~0.05, so this is a 4-sigma move of a 3-step median."""
LENGTH_FRACTION = 0.5
"""Length collapse: tokens per turn at or below half their start (the seed's per-token A/L
trades reasoning for tool calls; halving is far outside sampling noise)."""
ACTION_FRACTION = 0.25
"""Action collapse: tool calls per episode at or below a quarter of the starting policy's for 2
steps. The start is step 1's rollout alone, the only batch sampled before any update: a run
that breaks on its first update has no second healthy step to take a median over. Healthy CPU
runs stayed within 0.5-1.5x of it; stress runs that stopped acting fell to 0-11%."""
ACTION_MIN_START = 0.5
"""Below half a call per episode at the start, the policy hardly acts: nothing to lose."""
WRITE_FRACTION = 0.5
"""Doing less: the share of episodes that call a write tool at or below half its start …"""
WRITE_DROP = 0.2
"""… and at least 0.2 below it. A share over B = 32 episodes wobbles by ~0.09 a step (binomial),
~0.14 with the task mix (a batch of refusal tasks asks for fewer writes); a 3-step median held
for 3 steps below both bars is far outside that …"""
REWARD_RISE = 0.0
"""… while the training reward is above its start (not falling: a policy whose reward falls with
its writes is broken, not gaming the reward). No margin: with 4 tasks a step the task mix moves
the reward by ~0.1 (against the writes), so a margin costs power and keeps out few false alarms …"""
DOING_LESS_STEPS = 3
"""… for 3 smoothed steps in a row: two noisy series must agree, as for reward hacking."""
WRITE_MIN_START = 0.2
"""Below a write in one episode in five at the start there is too little writing to lose."""
GRAD_EXPLOSION = 5.0
"""Gradient explosion: a (pre-clip) gradient norm 5× the median of all earlier steps; in our
tiny-preset runs a healthy step's norm stayed within ~3.5× of the steps before it …"""
GRAD_EXPLOSION_FLOOR = 1.0
"""… and at least 1.0, the default clip norm: after steps whose groups differed only by the
damped process score (norms ~0.01), the first outcome-mixed group's ordinary ~0.6 is 50× its
history but no explosion (seen in the CPU ablation's PRM-Lite runs)."""
MIN_HISTORY = 3
"""Steps of history a running median needs before it is trusted."""
PROCESS_RISE = 0.05
"""Reward hacking: the process score (clamped to [-0.5, 0.5]) up by 0.05, about one
data-chain bonus per trajectory's mean step …"""
OUTCOME_SLACK = 0.02
"""… while the outcome is at most 0.02 above its start (flat or down), …"""
HACKING_STEPS = 3
"""… for 3 smoothed steps in a row."""
VAL_GAP = 0.25
"""Validation pass^1 at least 0.25 above the evaluation's …"""
VAL_GAP_SIGMAS = 2.0
"""… and more than 2 standard errors of the difference (binomial, when both sizes are known):
an 8-task validation set alone has a standard error near 0.18."""


@dataclass
class Finding:
    check: str
    step: int
    """The step (as logged in metrics.jsonl) the signature began."""
    summary: str
    """One line: what was seen, with the numbers."""
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def is_collapse(self) -> bool:
        """Whether training broke the policy (entropy, format, length, gradient, or LLD past its
        first phase), rather than a warning: saturated groups give no signal, a hacked or
        over-fitted reward and a policy doing less for more reward are misaligned, LLD's phase 1
        alone is its precursor."""
        if self.check == "lld":
            return self.evidence.get("phases", 1) >= 2
        return self.check in COLLAPSE_CHECKS


COLLAPSE_CHECKS = ("entropy_collapse", "format_collapse", "length_collapse", "action_collapse", "grad_explosion",
                   "lld")
"""The checks whose findings count as a collapse (``lld`` from its second phase)."""


def baseline(s: Series, label: str) -> float:
    """The median of the series' first ``BASELINE_STEPS`` finite values."""
    values = s.finite()
    if len(values) < BASELINE_STEPS + PERSIST_STEPS:
        raise NotApplicable(f"{s.name}: {len(values)} step(s), too few to compare with the {label}")
    return statistics.median(values[:BASELINE_STEPS])


def _level_check(s: Series, crossed: Callable[[float], bool], persist: int = PERSIST_STEPS) -> tuple[int, int] | None:
    smoothed = smooth(s.values)
    return first_run([v is not None and crossed(v) for v in smoothed], persist)


# ---- checks: each returns a Finding or None, or raises NotApplicable ----------------------------
def check_group_saturation(log: RunLog) -> Finding | None:
    s = series(log.records, metric.REWARD_OUTCOME_SATURATED_GROUP_FRAC, metric.ALGO_SATURATED_GROUP_FRAC)
    run = _level_check(s, lambda v: v >= SATURATION_FRAC, SATURATION_STEPS)
    if run is None:
        return None
    start, length = run
    level = statistics.median(v for v in s.values[start : start + length] if v is not None)
    return Finding("group_saturation", s.steps[start],
                   f"{s.name} >= {SATURATION_FRAC} for {length} steps (median {level:.2f}): most groups give "
                   "zero advantage", {"metric": s.name, "threshold": SATURATION_FRAC, "steps": length,
                                      "median": level})


def check_lld(log: RunLog) -> Finding | None:
    s = series(log.records, metric.ALGO_LOGP_CHANGE_ADV_NONNEG)
    run = first_run([v is not None and v < 0 for v in s.values], LLD_STEPS)
    if run is None:
        return None
    start, length = run
    phase1 = s.steps[start]
    fall = statistics.median(v for v in s.values[start : start + length] if v is not None)
    evidence: dict[str, Any] = {"metric": s.name, "phase1_step": phase1, "phase1_steps": length,
                                "phase1_median": fall, "phase2_step": None, "phase3_step": None}
    parts = [f"log-prob of A >= 0 actions fell {length} steps in a row (median {fall:+.3g} nats/token)"]
    entropy_step = _entropy_rise(log, phase1, evidence)
    if entropy_step is not None:
        parts.append(f"then entropy up {evidence['entropy_rise']:.0%} at step {entropy_step}")
        grad_step = _grad_spike(log, entropy_step, evidence)
        if grad_step is not None:
            parts.append(f"then grad norm {evidence['grad_ratio']:.1f}x its running median at step {grad_step}")
    phases = 1 + (evidence["phase2_step"] is not None) + (evidence["phase3_step"] is not None)
    evidence["phases"] = phases
    return Finding("lld", phase1, f"phase {phases}/3: " + "; ".join(parts), evidence)


def _entropy_rise(log: RunLog, phase1: int, evidence: dict[str, Any]) -> int | None:
    """LLD phase 2: the first step from ``phase1`` whose smoothed entropy is ``ENTROPY_RISE`` above
    the median of the steps up to ``phase1`` (the last ``BASELINE_STEPS`` of them)."""
    try:
        s = series(log.records, metric.LOSS_ENTROPY)
    except NotApplicable:
        evidence["phase2"] = f"{metric.LOSS_ENTROPY} not logged"
        return None
    before = [v for step, v in zip(s.steps, s.values) if step <= phase1 and v is not None][-BASELINE_STEPS:]
    if not before or before[-1] <= 0:
        return None
    base = statistics.median(before)
    smoothed = smooth(s.values)
    flags = [step >= phase1 and v is not None and v >= base * (1 + ENTROPY_RISE) for step, v in zip(s.steps, smoothed)]
    run = first_run(flags, PERSIST_STEPS)
    if run is None:
        return None
    step = s.steps[run[0]]
    evidence.update(phase2_step=step, entropy_before=base, entropy_rise=smoothed[run[0]] / base - 1)
    return step


def _grad_spike(log: RunLog, phase2: int, evidence: dict[str, Any]) -> int | None:
    """LLD phase 3: the first step from ``phase2`` with a gradient norm ``GRAD_SPIKE`` × its running median."""
    try:
        hit = _first_grad_ratio(series(log.records, metric.ALGO_GRAD_NORM), GRAD_SPIKE, since=phase2)
    except NotApplicable:
        evidence["phase3"] = f"{metric.ALGO_GRAD_NORM} not logged"
        return None
    if hit is None:
        return None
    step, ratio, _ = hit
    evidence.update(phase3_step=step, grad_ratio=ratio)
    return step


def _first_grad_ratio(s: Series, factor: float, since: int = 0,
                      floor: float = 0.0) -> tuple[int, float, float] | None:
    """``(step, value / running median, running median)`` of the first step from ``since`` whose
    gradient norm is non-finite or ``factor`` × the median of all earlier steps' norms (and at
    least ``floor``)."""
    for i in range(MIN_HISTORY, len(s.values)):
        history = [v for v in s.values[:i] if v is not None]
        if s.steps[i] < since or len(history) < MIN_HISTORY:
            continue
        median = statistics.median(history)
        value = s.values[i]
        if value is None:
            return s.steps[i], math.inf, median
        if median > 0 and value >= max(factor * median, floor):
            return s.steps[i], value / median, median
    return None


def check_entropy_collapse(log: RunLog) -> Finding | None:
    return _fell_to_fraction("entropy_collapse", series(log.records, metric.LOSS_ENTROPY), ENTROPY_FRACTION, ".3g")


def check_format_collapse(log: RunLog) -> Finding | None:
    s = series(log.records, metric.ROLLOUT_MALFORMED_TURN_RATE, metric.ROLLOUT_INVALID_RATE)
    start = baseline(s, "start")
    run = _level_check(s, lambda v: v >= start + FORMAT_RISE)
    if run is None:
        return None
    level = smooth(s.values)[run[0]]
    return Finding("format_collapse", s.steps[run[0]],
                   f"{s.name} {start:.2f} -> {level:.2f} (rolling median; > start + {FORMAT_RISE}) for {run[1]} steps",
                   {"metric": s.name, "start": start, "value": level, "steps": run[1]})


def check_length_collapse(log: RunLog) -> Finding | None:
    s = series(log.records, metric.ROLLOUT_TOKENS_PER_TURN_MEAN, metric.ROLLOUT_TOKENS_PER_TURN_P50,
               metric.ROLLOUT_RESPONSE_TOKENS_MEAN)
    return _fell_to_fraction("length_collapse", s, LENGTH_FRACTION, ".1f")


def _fell_to_fraction(check: str, s: Series, fraction: float, number: str) -> Finding | None:
    """``s`` at or below ``fraction`` of its start for consecutive steps (a positive series collapsing)."""
    start = baseline(s, "start")
    if start <= 0:
        raise NotApplicable(f"{s.name} starts at 0")
    run = _level_check(s, lambda v: v <= fraction * start)
    if run is None:
        return None
    level = smooth(s.values)[run[0]]
    return Finding(check, s.steps[run[0]],
                   f"{s.name} {start:{number}} -> {level:{number}} ({level / start:.0%} of its start; "
                   f"<= {fraction:.0%}) for {run[1]} steps",
                   {"metric": s.name, "start": start, "value": level, "steps": run[1]})


def check_action_collapse(log: RunLog) -> Finding | None:
    """The policy stops calling tools: the collapse a run that breaks at once shows first."""
    s = series(log.records, metric.ROLLOUT_TOOL_CALLS_MEAN)
    if len(s.finite()) < 1 + PERSIST_STEPS:
        raise NotApplicable(f"{s.name}: {len(s.finite())} step(s), too few to compare with the start")
    first = next(i for i, v in enumerate(s.values) if v is not None)
    start = s.values[first]
    if start < ACTION_MIN_START:
        raise NotApplicable(f"{s.name} starts at {start:.2f} calls per episode: the policy hardly acts")
    # the starting step itself is left out of the smoothing: its window would hold the collapse
    after = Series(s.name, s.steps[first + 1 :], s.values[first + 1 :])
    run = _level_check(after, lambda v: v <= ACTION_FRACTION * start)
    if run is None:
        return None
    level = smooth(after.values)[run[0]]
    return Finding("action_collapse", after.steps[run[0]],
                   f"{s.name} {start:.2f} -> {level:.2f} ({level / start:.0%} of the starting policy's; "
                   f"<= {ACTION_FRACTION:.0%}) for {run[1]} steps: it stopped calling tools",
                   {"metric": s.name, "start": start, "value": level, "steps": run[1]})


def check_grad_explosion(log: RunLog) -> Finding | None:
    s = series(log.records, metric.ALGO_GRAD_NORM)
    if len(s.values) <= MIN_HISTORY:
        raise NotApplicable(f"{s.name}: {len(s.values)} step(s), too few for a running median")
    hit = _first_grad_ratio(s, GRAD_EXPLOSION, floor=GRAD_EXPLOSION_FLOOR)
    if hit is None:
        return None
    step, ratio, median = hit
    what = "non-finite" if math.isinf(ratio) else f"{ratio:.1f}x its running median {median:.3g}"
    return Finding("grad_explosion", step, f"{s.name} {what} (threshold {GRAD_EXPLOSION}x)",
                   {"metric": s.name, "ratio": None if math.isinf(ratio) else ratio, "running_median": median})


def check_reward_hacking(log: RunLog) -> Finding | None:
    process = series(log.records, metric.REWARD_PROCESS_MEAN)
    outcome = series(log.records, metric.REWARD_OUTCOME_MEAN)
    total = [(r.get(metric.REWARD_TOTAL_MEAN), r.get(metric.REWARD_OUTCOME_MEAN)) for r in log.records]
    if all(t is None or o is None or abs(t - o) < 1e-9 for t, o in total):
        raise NotApplicable("the reward never differs from the outcome (reward.process_coef = 0)")
    if process.steps != outcome.steps:
        raise NotApplicable(f"{process.name} and {outcome.name} were logged at different steps")
    p0, o0 = baseline(process, "start"), baseline(outcome, "start")
    p, o = smooth(process.values), smooth(outcome.values)
    flags = [pv is not None and ov is not None and pv >= p0 + PROCESS_RISE and ov <= o0 + OUTCOME_SLACK
             for pv, ov in zip(p, o)]
    run = first_run(flags, HACKING_STEPS)
    if run is None:
        return None
    i = run[0]
    return Finding("reward_hacking", process.steps[i],
                   f"process score {p0:+.3f} -> {p[i]:+.3f} while outcome {o0:.3f} -> {o[i]:.3f} "
                   f"(rolling medians) for {run[1]} steps",
                   {"process_start": p0, "process": p[i], "outcome_start": o0, "outcome": o[i], "steps": run[1]})


def check_doing_less(log: RunLog) -> Finding | None:
    """The policy learns to do less: it stops writing (booking, cancelling, changing) while the
    training reward rises, because refusing or transferring is the cheapest reward."""
    writes = series(log.records, metric.ROLLOUT_WRITE_EPISODE_FRAC)
    reward = series(log.records, metric.REWARD_TOTAL_MEAN, metric.REWARD_OUTCOME_MEAN)
    if writes.steps != reward.steps:
        raise NotApplicable(f"{writes.name} and {reward.name} were logged at different steps")
    w0, r0 = baseline(writes, "start"), baseline(reward, "start")
    if w0 < WRITE_MIN_START:
        raise NotApplicable(f"{writes.name} starts at {w0:.2f}: the policy hardly writes")
    w, r = smooth(writes.values), smooth(reward.values)
    bar = min(WRITE_FRACTION * w0, w0 - WRITE_DROP)
    flags = [wv is not None and rv is not None and wv <= bar and rv > r0 + REWARD_RISE for wv, rv in zip(w, r)]
    run = first_run(flags, DOING_LESS_STEPS)
    if run is None:
        return None
    i = run[0]
    evidence: dict[str, Any] = {"metric": writes.name, "write_start": w0, "write": w[i], "reward_metric": reward.name,
                                "reward_start": r0, "reward": r[i], "steps": run[1]}
    executed = ""
    try:
        done = series(log.records, metric.ROLLOUT_EXECUTED_WRITE_EPISODE_FRAC)
        done_by_step = dict(zip(done.steps, smooth(done.values)))
        e0, e = baseline(done, "start"), done_by_step.get(writes.steps[i])
        if e is not None:
            evidence.update(executed_write_start=e0, executed_write=e)
            executed = f" (executed {e0:.2f} -> {e:.2f})"
    except NotApplicable:
        pass
    return Finding("doing_less", writes.steps[i],
                   f"episodes with a write call {w0:.2f} -> {w[i]:.2f}{executed} while {reward.name} "
                   f"{r0:.3f} -> {r[i]:.3f} (rolling medians) for {run[1]} steps: it writes less for more reward",
                   evidence)


def check_val_test_gap(log: RunLog) -> Finding | None:
    val = series(log.records, metric.VAL_PASS1)
    eval_json = log.eval_json or find_eval(log.path)
    if eval_json is None:
        raise NotApplicable(f"no evaluation found ({log.path}/eval/eval.json, or pass --eval)")
    i = max(j for j, v in enumerate(val.values) if v is not None)  # the last validation: the final policy's
    v, step = val.values[i], val.steps[i]
    t, label, test_n = eval_pass1(eval_json)
    val_n = next((r.get(metric.VAL_EPISODES) for r in log.records if r["step"] == step), None)
    gap = v - t
    se = None
    if isinstance(val_n, (int, float)) and val_n > 0 and test_n:
        se = math.sqrt(v * (1 - v) / val_n + t * (1 - t) / test_n)
    if gap < VAL_GAP or (se is not None and gap < VAL_GAP_SIGMAS * se):
        return None
    noise = f", {gap / se:.1f} standard errors" if se else ""
    return Finding("val_test_gap", step, f"{val.name} {v:.3f} vs evaluation {label} {t:.3f} (gap {gap:+.3f}{noise}; "
                   f"{eval_json})", {"val_pass1": v, "test_pass1": t, "test_figure": label, "gap": gap,
                                     "standard_error": se, "eval": str(eval_json)})


CHECKS: dict[str, Callable[[RunLog], Finding | None]] = {
    # name → check, in report order
    "group_saturation": check_group_saturation,
    "lld": check_lld,
    "entropy_collapse": check_entropy_collapse,
    "format_collapse": check_format_collapse,
    "length_collapse": check_length_collapse,
    "action_collapse": check_action_collapse,
    "grad_explosion": check_grad_explosion,
    "reward_hacking": check_reward_hacking,
    "doing_less": check_doing_less,
    "val_test_gap": check_val_test_gap,
}


