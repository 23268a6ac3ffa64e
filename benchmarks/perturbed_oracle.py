"""Evaluation transcripts with both outcomes, without a trained policy: the oracle with faults.

    python benchmarks/perturbed_oracle.py --out runs/perturbed [--rate 0.12] [--trials 4]

The oracle (the teacher that solves every generated task) plays the env's evaluation tasks
(``configs/eval.yaml``: 50 tasks, the scripted user) while, at each turn with probability
``--rate``, one fault a weak policy makes is injected instead of its next move:

* ``malformed``: a malformed generation (the oracle's move is played on the next turn);
* ``repeat``: the last successful call again, same arguments (then the oracle's move);
* ``bad_id``: the oracle's call with one id argument replaced by another well-formed id
  (the oracle then reads what comes back and carries on, or gives up);
* ``wrong_value``: the oracle's write with one non-id argument changed;
* ``transfer``: a transfer to a human agent instead of the move (the episode ends).

The environment grades every episode as usual, so which faults end in failure is its
verdict, not ours. Writes ``transcripts.jsonl`` in ``agentgrpo eval``'s format (task_id,
trial, reward, aborted, messages, and the faults injected), which
``benchmarks/prm_auroc.py`` scores.
"""
from __future__ import annotations

import argparse
import json
import random
import string
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentgrpo.envs.episode import run_episode  # noqa: E402
from agentgrpo.envs.registry import build_env, domain_oracle, make_env  # noqa: E402
from agentgrpo.envs.types import Action  # noqa: E402
from agentgrpo.eval.cli import load_eval_config  # noqa: E402
from agentgrpo.eval.runner import episode_jobs  # noqa: E402
from agentgrpo.eval.tasks import eval_tasks  # noqa: E402
from agentgrpo.train.task_sampler import derive_seed  # noqa: E402
from benchmarks._common import bench  # noqa: E402

FAULTS = ("malformed", "repeat", "bad_id", "wrong_value", "transfer")
ID_ARGUMENTS = ("reservation_id", "user_id", "payment_id", "flight_number")
MALFORMED = 'I will call {"name": "get_reservation_details", "arguments": {"reservation_id": '


class PerturbedOracle:
    """The oracle's moves, with a random fault injected at some turns (module docstring)."""

    def __init__(self, oracle: Any, rng: random.Random, rate: float) -> None:
        self.oracle, self.rng, self.rate = oracle, rng, rate
        self.held: tuple[Action, str] | None = None   # the oracle's move a fault went before
        self.last_call: Action | None = None
        self.last_text = ""
        self.last_error: str | None = None
        self.faults: list[str] = []

    def act(self, observation: str) -> Action:
        self.last_error = None
        if self.held is not None:
            (action, text), self.held = self.held, None
        else:
            action, text = self.oracle.act(observation), self.oracle.last_text
        if self.rng.random() < self.rate:
            action, text = self._fault(action, text)
        elif not action.is_respond:
            self.last_call = action
        self.last_text = text
        return action

    def _fault(self, action: Action, text: str) -> tuple[Action, str]:
        kind = self.rng.choice(FAULTS)
        ids = [k for k in ID_ARGUMENTS if isinstance(action.kwargs.get(k), str)]
        if kind == "repeat" and self.last_call is None or kind == "bad_id" and not ids or (
                kind == "wrong_value" and not _changeable(action)):
            kind = "malformed"
        self.faults.append(kind)
        if kind == "malformed":
            self.held = (action, text)
            self.last_error = "the tool call is not valid JSON."
            return action, MALFORMED
        if kind == "repeat":
            self.held = (action, text)
            return self.last_call, "Let me look that up again."
        if kind == "transfer":
            return Action("transfer_to_human_agents", {"summary": "The user needs help."}), \
                "I will transfer you to a human agent."
        kwargs = dict(action.kwargs)
        if kind == "bad_id":
            key = self.rng.choice(ids)
            kwargs[key] = _other_id(kwargs[key], self.rng)
        else:
            key = self.rng.choice(_changeable(action))
            kwargs[key] = _other_value(kwargs[key])
        return Action(action.name, kwargs), text


def _changeable(action: Action) -> list[str]:
    """Non-id scalar arguments of a write a fault may change."""
    if action.is_respond or not action.name.startswith(("book_", "update_", "cancel_", "send_")):
        return []
    return [k for k, v in action.kwargs.items()
            if k not in ID_ARGUMENTS and isinstance(v, (str, int, float)) and not isinstance(v, bool)]


def _other_id(value: str, rng: random.Random) -> str:
    """A well-formed id of the same shape: its last four characters (letters or digits)
    each replaced by another of the same kind."""
    def swap(c: str) -> str:
        for pool in (string.digits, string.ascii_uppercase, string.ascii_lowercase):
            if c in pool:
                return rng.choice(pool.replace(c, ""))
        return c
    head, tail = value[:-4], value[-4:]
    return head + "".join(swap(c) for c in tail)


def _other_value(value: Any) -> Any:
    if isinstance(value, (int, float)):
        return value + 1
    return {"economy": "business", "business": "economy", "basic_economy": "economy",
            "yes": "no", "no": "yes", "one_way": "round_trip", "round_trip": "one_way"}.get(value, value + "x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rate", type=float, default=0.12, help="chance of a fault at each turn")
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    config = load_eval_config([f"trials={args.trials}", f"seed={args.seed}"])
    bundle = build_env(config.env)
    jobs = episode_jobs(config, eval_tasks(config, bundle))
    args.out.mkdir(parents=True, exist_ok=True)
    successes = 0
    with open(args.out / "transcripts.jsonl", "w", encoding="utf-8") as log:
        for job in jobs:
            env = make_env(job.bundle, job.task, config.env, job.user_seed, max_steps=config.rollout.max_turns)
            rng = random.Random(derive_seed("perturbed_oracle", args.seed, job.task.task_id, job.trial))
            agent = PerturbedOracle(domain_oracle(config.env, job.bundle, job.task), rng, args.rate)
            result = run_episode(env, agent)
            successes += result.reward == 1.0
            log.write(json.dumps({"task_id": job.task.task_id, "trial": job.trial, "reward": result.reward,
                                  "aborted": False, "messages": result.messages, "faults": agent.faults}) + "\n")
    print(f"{len(jobs)} episodes, {successes} successes, rate {args.rate}: {args.out / 'transcripts.jsonl'}")
    bench("perturbed_oracle_success_rate", successes / len(jobs), "info")


if __name__ == "__main__":
    main()
