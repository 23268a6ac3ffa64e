"""``agentgrpo sanity``: does the GRPO trainer learn? A learning check with controls.

A trainer whose advantages have the wrong sign, whose response mask is one token off or
whose advantages sit on the wrong rows still runs, logs and writes checkpoints; only a
task it must *learn* tells. This job trains a toy domain (``env.domain=toy_one_key``: submit
the user's key, one of K = 4 valid keys, in one ``submit`` call, then reply; every user
states the same key) through the real ``GRPOTrainer`` — rollout engine, PRM-Lite scoring,
advantage estimator, ``grpo_objective``, AdamW — in three arms, each over the given seeds:

* ``real``: the reward must rise from near chance (1/K) to at least ``THRESHOLD``
  (mean of the last ``WINDOW`` steps), and significantly (the rule below);
* ``negated``: every advantage negated (``algo.advantage_sign=-1``): it must not rise;
* ``lr0``: ``trainer.lr=0``: it must stay flat.

Rule: the successes of the first ``WINDOW`` steps and of the last ``WINDOW`` steps are
compared with a two-proportion z-test (pooled variance). "Rises" is z > ``Z_CRIT``;
"flat" is |z| <= ``Z_CRIT``.

Why a warm-up: from random weights a tool call has ~0 probability, so every group is
all-zero and GRPO gets no signal. Each seed first fine-tunes the toy policy (the ``toy``
preset: a 2-layer Llama, d = 64, whose tokenizer makes each whole tool call one token, so
the key decision is the first token of the agent's turn) with the real SFT code on
demonstrations whose key is drawn uniformly at random, with a user who asks for a key
without stating one (``ToyUser(states_key=False)``): the policy learns the call format but
not which key, and GRPO starts at chance. Overrides (``experiment=lata``, ``algo.*``,
``trainer.*``) apply to every arm's GRPO config, after the check's own settings.

Why one stated key: the first-token decision is then a four-armed bandit behind the full
multi-turn path (tool call, observation, reply, user stop, state grading), learnt in a
handful of steps. ``env.domain=toy`` (users state any of the 4 keys: the policy must copy
it) is the harder variant; with this 0.1M-parameter policy it did not learn within 24
steps (0.23-0.25 on seeds 0 and 1; a supervised copy on the warmed-up policy needed more
than 60 steps of 32), so it is not the default.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentgrpo import metric_names as metric
from agentgrpo.config import load_config

ARMS: dict[str, list[str]] = {
    "real": [],
    "negated": ["algo.advantage_sign=-1"],
    "lr0": ["trainer.lr=0"],
}
"""Each arm's overrides, applied after the user's (an arm's control always holds)."""
SANITY_GRPO: list[str] = [
    "env.domain=toy_one_key", "trainer.steps=16", "trainer.tasks_per_step=8", "trainer.group_size=8",
    "trainer.mini_batch_size=32", "trainer.micro_batch_size=32", "trainer.lr=4e-3", "trainer.warmup_steps=10",
    "trainer.lr_schedule=cosine", "trainer.save_every=0", "trainer.keep_last=1", "trainer.val_every=0",
    "trainer.lld_diagnostic=false", "rollout.temperature=1.0", "rollout.max_turns=4", "rollout.max_new_tokens=8",
    "rollout.max_total_tokens=512", "logging.progress=false",
]
"""GRPO settings of the check (before the user's overrides): 8 tasks × G = 8 per step, two
optimizer steps per rollout (so LLDS acts), sampling at T = 1 (the policy's own
distribution: chance is 1/K), turns of a few tokens, and a learning-rate warm-up (AdamW's
first steps move every weight by ~lr whatever its gradient: at 5e-3 without warm-up the
toy policy stopped calling the tool after one step), then a cosine decay towards 0: once
the key is learnt, a PRM-Lite experiment's only gradient is the process score's small
differences (and the KL's), which AdamW still turns into steps of ~lr per weight; at a
constant 5e-3 the learnt policy then broke its format within a step. The peak is 4e-3: at 5e-3 a
seed whose warm-up starts below chance collapsed at the warm-up's peak (entropy 0.5 → 5.9 in two
updates) on some CPUs; 4e-3 passed seeds 0-9 (docs/sanity.md)."""
SANITY_SFT: list[str] = [
    "trainer.epochs=6", "trainer.batch_size=16", "trainer.micro_batch_size=16", "trainer.lr=1e-2",
    "data.demos_per_task=8", "data.max_length=512", "progress=false",
]
"""The warm-up: 16 tasks × 8 demonstrations, 6 epochs (48 optimizer steps, loss 0.36 against a
floor of ln(4)/4 = 0.35): the format, and a uniform key. 2 epochs left a third of the turns
malformed."""
WINDOW = 4
"""Steps averaged at the start and at the end of a curve."""
THRESHOLD = 0.8
"""The real arm's final-window reward must reach this."""
Z_CRIT = 3.0
"""z of the two-proportion test beyond which a change is not noise (one-sided p ≈ 0.0013)."""


@dataclass
class ArmResult:
    """One arm on one seed: its reward curve and what the rule made of it."""

    arm: str
    seed: int
    curve: list[float]
    episodes_per_step: list[int]
    first: float
    last: float
    z: float
    passed: bool
    reason: str
    seconds: float


@dataclass
class SanityReport:
    """Everything ``sanity`` measured; ``passed`` iff every arm of every seed passed."""

    overrides: list[str]
    seeds: list[int]
    chance: float
    threshold: float = THRESHOLD
    window: int = WINDOW
    z_crit: float = Z_CRIT
    arms: list[ArmResult] = field(default_factory=list)
    warmup_seconds: list[float] = field(default_factory=list)
    wall_seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return bool(self.arms) and all(arm.passed for arm in self.arms)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}


def two_proportion_z(successes_a: float, n_a: int, successes_b: float, n_b: int) -> float:
    """z of ``p_b − p_a`` with the pooled variance; 0 when both proportions are 0 or 1."""
    pooled = (successes_a + successes_b) / (n_a + n_b)
    variance = pooled * (1 - pooled) * (1 / n_a + 1 / n_b)
    if variance <= 0:
        return 0.0
    return (successes_b / n_b - successes_a / n_a) / math.sqrt(variance)


def judge(arm: str, curve: list[float], episodes: list[int], window: int = WINDOW,
          threshold: float = THRESHOLD, z_crit: float = Z_CRIT) -> tuple[float, float, float, bool, str]:
    """``(first, last, z, passed, reason)`` of one curve under the arm's rule (module docstring)."""
    if len(curve) < 2 * window:
        raise ValueError(f"a curve of {len(curve)} steps is too short for two windows of {window}")
    n_first, n_last = sum(episodes[:window]), sum(episodes[-window:])
    s_first = sum(r * n for r, n in zip(curve[:window], episodes[:window]))
    s_last = sum(r * n for r, n in zip(curve[-window:], episodes[-window:]))
    first, last = s_first / n_first, s_last / n_last
    z = two_proportion_z(s_first, n_first, s_last, n_last)
    if arm == "real":
        passed = last >= threshold and z > z_crit
        reason = f"last {last:.2f} {'>=' if last >= threshold else '<'} {threshold} and z {z:+.1f}"
    elif arm == "negated":
        passed = z <= z_crit
        reason = f"z {z:+.1f} {'<=' if passed else '>'} {z_crit} (must not rise)"
    else:
        passed = abs(z) <= z_crit
        reason = f"|z| {abs(z):.1f} {'<=' if passed else '>'} {z_crit} (must stay flat)"
    return first, last, z, passed, reason


def read_curve(run_dir: Path, episodes_per_round: int) -> tuple[list[float], list[int]]:
    """The outcome reward of each step and its episode count, from the run's metrics.jsonl."""
    curve, episodes = [], []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if metric.REWARD_OUTCOME_MEAN in record:
            curve.append(float(record[metric.REWARD_OUTCOME_MEAN]))
            episodes.append(episodes_per_round * int(record.get(metric.ROLLOUT_GENERATION_ROUNDS, 1)))
    return curve, episodes


# ---------------------------------------------------------------------------- stages
def toy_atomic_texts(spec: Any, domain: Any, agent_config: dict[str, Any]) -> list[str]:
    """What the toy tokenizer keeps as one token each: every whole ``submit`` call, the closing
    message and the system prompt. The agent's turns are then two tokens each (the text and the
    end of turn): the warm-up learns the format in a few steps, and the key is the first token."""
    from agentgrpo.agent.chat import PROMPT_STYLES
    from agentgrpo.agent.format import render_assistant

    calls = [render_assistant("", spec.submit_tool, {"key": key}) for key in domain.keys]
    system_prompt = PROMPT_STYLES[agent_config["prompt_style"]](domain.policy, domain.tool_schemas())
    return [*calls, spec.done_message, system_prompt]


def warm_up(grpo_config: Any, seed: int, out: Path) -> Path:
    """Build the toy policy and fine-tune it on random-key demonstrations; returns its checkpoint."""
    from agentgrpo.envs.episode import run_episode
    from agentgrpo.envs.registry import build_env, get_domain
    from agentgrpo.policy.hf import build_policy
    from agentgrpo.train.demonstrations import Demonstration, transcript_text
    from agentgrpo.train.sft import train_sft
    from agentgrpo.train.sft_config import SFTConfig

    env = grpo_config.env
    sft_config = load_config(SFTConfig, [*SANITY_SFT, f"seed={seed}", f"run_dir={out / 'sft'}",
                                         f"policy.init={out / 'init'}", f"policy.device={grpo_config.policy.device}"],
                             defaults="sft.yaml")
    sft_config.env = env
    bundle = build_env(env)
    spec: Any = get_domain(env.domain)  # a toy domain (checked by the caller): it has the warm-up
    demos = []
    for task in bundle.tasks(sft_config.data.splits):
        for k in range(sft_config.data.demos_per_task):
            user_seed = seed * 1000 + k
            result = run_episode(*spec.warmup_episode(bundle, task, user_seed))
            demos.append(Demonstration(task.task_id, user_seed, result.reward, result.messages))
    agent_config = {"prompt_style": "full"}  # the toy policy's own text; one token with the toy tokenizer
    corpus = [*spec.corpus(bundle), *(transcript_text(d.messages) for d in demos),
              "system user assistant tool"]
    build_policy("toy", corpus, out / "init", seed=seed, agent_config=agent_config,
                 atomic_texts=toy_atomic_texts(spec, bundle.domain, agent_config))
    return train_sft(sft_config, demonstrations=demos)


def run_arm(arm: str, seed: int, init: Path, overrides: list[str], out: Path) -> ArmResult:
    """One GRPO run of ``arm`` from the warm-up checkpoint ``init``, judged by ``judge``."""
    from agentgrpo.train.grpo import GRPOTrainer
    from agentgrpo.train.grpo_config import GRPOConfig

    clock = time.perf_counter()
    config = load_config(GRPOConfig, [*SANITY_GRPO, *overrides, *ARMS[arm], f"seed={seed}",
                                      f"run_dir={out}", f"policy.init={init}"], defaults="grpo.yaml")
    GRPOTrainer(config).train()
    curve, episodes = read_curve(out, config.trainer.tasks_per_step * config.trainer.group_size)
    first, last, z, passed, reason = judge(arm, curve, episodes)
    return ArmResult(arm, seed, curve, episodes, first, last, z, passed, reason, time.perf_counter() - clock)


def run_sanity(out: str | Path, overrides: list[str] | None = None, seeds: list[int] | None = None,
               arms: list[str] | None = None, echo: Any = print) -> SanityReport:
    """Warm up once per seed, run every arm, judge; writes ``out/sanity.json`` and returns the report."""
    from agentgrpo.config import ConfigError
    from agentgrpo.envs.registry import get_domain
    from agentgrpo.train.grpo_config import GRPOConfig

    start = time.perf_counter()
    overrides, seeds, arms = list(overrides or []), list(seeds or [0, 1]), list(arms or ARMS)
    unknown = [arm for arm in arms if arm not in ARMS]
    if unknown:
        raise ConfigError(f"--arms {unknown} is invalid: choose among {list(ARMS)}")
    out = Path(out)
    base = load_config(GRPOConfig, [*SANITY_GRPO, *overrides], defaults="grpo.yaml")
    if not base.env.domain.startswith("toy"):
        raise ConfigError(f"env.domain={base.env.domain!r} is invalid for sanity: the check runs on a toy domain "
                          "(toy_one_key, toy)")
    report = SanityReport(overrides=overrides, seeds=seeds, chance=1 / get_domain(base.env.domain).n_keys)
    for seed in seeds:
        clock = time.perf_counter()
        init = warm_up(base, seed, out / f"seed{seed}")
        report.warmup_seconds.append(time.perf_counter() - clock)
        echo(f"seed {seed}: warm-up {report.warmup_seconds[-1]:.0f}s")
        for arm in arms:
            result = run_arm(arm, seed, init, overrides, out / f"seed{seed}" / arm)
            report.arms.append(result)
            echo(format_arm(result))
    report.wall_seconds = time.perf_counter() - start
    (out / "sanity.json").write_text(json.dumps(report.to_dict(), indent=2))
    return report


def format_arm(result: ArmResult) -> str:
    curve = " ".join(f"{r:.2f}" for r in result.curve)
    verdict = "PASS" if result.passed else "FAIL"
    return (f"  {result.arm:<8} seed {result.seed}: {verdict}  first {result.first:.2f} -> last {result.last:.2f}"
            f"  ({result.reason}; {result.seconds:.0f}s)\n    reward: {curve}")


# ------------------------------------------------------------------------------- CLI
DESCRIPTION = f"""Check that GRPO learns, with controls, on a toy domain (env.domain=toy_one_key: submit the
key the user states with one tool call, then reply; 4 keys are valid, every user states the same one), through the real
trainer. Per seed: a format warm-up (SFT on random-key demonstrations: chance = 1/4), then
three GRPO arms:
  real     the reward must rise to >= {THRESHOLD} (mean of the last {WINDOW} steps), significantly;
  negated  advantages negated (algo.advantage_sign=-1): must not rise;
  lr0      trainer.lr=0: must stay flat.
Rule: a two-proportion z-test between the successes of the first and last {WINDOW} steps;
rises: z > {Z_CRIT}; flat: |z| <= {Z_CRIT}. Exit 0 when every arm of every seed passes, 1 otherwise.
Overrides (experiment=NAME, algo.*, trainer.*, reward.*) apply to every arm."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("sanity", help="does GRPO learn? toy-domain check with negated/lr0 controls",
                                   description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/sanity", help="run directory; sanity.json is written there "
                        "(default: runs/sanity)")
    parser.add_argument("--seeds", default="0,1", help="comma-separated training seeds (default: 0,1)")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated arms (default: {','.join(ARMS)})")
    parser.add_argument("--json", action="store_true", help="print the JSON summary on stdout")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="GRPO overrides for every arm")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agentgrpo.config import ConfigError

    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        raise ConfigError(f"--seeds {args.seeds!r} is invalid: give comma-separated integers, e.g. 0,1") from None
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    echo = (lambda line: print(line, file=sys.stderr)) if args.json else print
    report = run_sanity(args.out, args.overrides, seeds, arms, echo=echo)
    verdict = "PASS: GRPO learns" if report.passed else "FAIL: see the arms above"
    echo(f"sanity {verdict} (chance {report.chance:.2f}; {report.wall_seconds:.0f}s; {Path(args.out) / 'sanity.json'})")
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    return 0 if report.passed else 1
