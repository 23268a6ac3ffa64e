"""``doing_less``: the share of episodes that write falls while the training reward rises. It fires
at the step it began on hand-made logs and on a log the trainer's metric code wrote from real
airline episodes, not when the reward falls with the writes or rises with writes flat, is not
applicable on older runs, and stays quiet on healthy runs whose task mix moves both series."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from helpers import small_env_config
from test_diagnose import fired, healthy, set_from, write_run

from agentgrpo.agent.types import Trajectory
from agentgrpo.diagnose import diagnose
from agentgrpo.diagnose.checks import check_doing_less
from agentgrpo.diagnose.read import RunLog
from agentgrpo.envs.episode import run_episode
from agentgrpo.envs.registry import build_env, domain_oracle, make_env, write_tools
from agentgrpo.envs.types import Action, Task
from agentgrpo.tracking import JsonlTracker
from agentgrpo.train.rollout_metrics import rollout_metrics

WRITES = "rollout/write_episode_frac"


def stops_writing(records: list[dict], start: int) -> list[dict]:
    """From ``start`` the share of episodes that write falls to 0.15 and then 0.05."""
    set_from(records, WRITES, start, lambda s: 0.15 if s == start else 0.05)
    return set_from(records, "rollout/executed_write_episode_frac", start, 0.02)


def test_doing_less_from_the_step_the_writes_fell_while_the_reward_rose(tmp_path):
    # healthy(): reward/total_mean 0.30 → 0.55, 0.38 or more (start 0.32 + 0.05) from step 5
    finding = diagnose(write_run(tmp_path, stops_writing(healthy(), 6))).findings[0]
    assert (finding.check, finding.step) == ("doing_less", 6)
    assert finding.evidence["write_start"] == pytest.approx(0.6)  # median(0.6, 0.66, 0.552)
    assert finding.evidence["write"] == pytest.approx(0.15) and finding.evidence["steps"] == 7
    assert finding.evidence["executed_write_start"] == pytest.approx(0.45)
    assert finding.evidence["executed_write"] == 0.02
    assert "0.60 -> 0.15 (executed 0.45 -> 0.02)" in finding.summary and not finding.is_collapse


def test_writes_falling_before_the_reward_rises_are_reported_when_both_hold(tmp_path):
    records = stops_writing(set_from(healthy(), "reward/total_mean", 1, 0.30), 3)
    set_from(records, "reward/total_mean", 8, 0.45)
    assert fired(write_run(tmp_path, records)) == {"doing_less": 8}


def test_writes_falling_with_the_reward_is_not_doing_less(tmp_path):
    """A policy that stops writing and loses reward for it is broken, not gaming the reward."""
    records = stops_writing(healthy(), 6)
    for key in ("reward/total_mean", "reward/outcome_mean"):
        set_from(records, key, 6, lambda s: 0.30 - 0.02 * (s - 6))
    assert fired(write_run(tmp_path, records)) == {}
    flat = set_from(stops_writing(healthy(), 6), "reward/total_mean", 1, 0.32)  # flat reward: not either
    assert fired(write_run(tmp_path, flat, name="flat")) == {}


def test_a_reward_rising_with_writes_flat_is_not_doing_less(tmp_path):
    records = set_from(healthy(), "reward/total_mean", 5, 0.9)
    set_from(records, WRITES, 5, lambda s: 0.55 if s % 2 else 0.65)  # writes wobble around their start
    assert fired(write_run(tmp_path, records)) == {}


def test_a_fall_that_lasts_two_steps_or_stays_above_half_the_start_is_not_doing_less(tmp_path):
    brief = set_from(healthy(), WRITES, 6, lambda s: 0.1 if s in (6, 7) else 0.6)
    assert fired(write_run(tmp_path, brief)) == {}
    shallow = set_from(healthy(), WRITES, 6, 0.35)  # 0.25 down, but more than half the start of 0.6
    assert fired(write_run(tmp_path, shallow, name="shallow")) == {}


def test_older_runs_and_runs_that_hardly_write_make_it_not_applicable(tmp_path):
    older = [{k: v for k, v in r.items() if not k.startswith("rollout/write")} for r in healthy()]
    result = diagnose(write_run(tmp_path, older))
    assert result.not_applicable == {"doing_less": "rollout/write_episode_frac not logged"}
    rare = set_from(healthy(), WRITES, 1, 0.1)
    result = diagnose(write_run(tmp_path, rare, name="rare"))
    assert "hardly writes" in result.not_applicable["doing_less"]
    assert "too few" in diagnose(write_run(tmp_path, healthy()[:4], name="short")).not_applicable["doing_less"]


# ---- the thresholds against the noise of a share over B episodes and of the task mix -----------------------
def simulated_run(rng: random.Random, tasks: int, group: int, stop_at: int | None = None, steps: int = 12) -> RunLog:
    """A run's log in a model of the airline: 60% of tasks need a write; the policy writes on 80%
    of those (succeeding 15% of the time) and wrongly on 30% of the others (which it then solves
    10% of the time, else 50%). A batch of many refusal tasks has fewer writes and more reward
    with no change in the policy. From ``stop_at`` on it never writes and solves 95% of the
    tasks that need no write (the airline runs' refusal and transfer families)."""
    records = []
    for step in range(1, steps + 1):
        wrote = solved = 0
        for _ in range(tasks):
            needs_write = rng.random() < 0.6
            for _ in range(group):
                if stop_at is not None and step >= stop_at:
                    solved += not needs_write and rng.random() < 0.95
                    continue
                writes = rng.random() < (0.8 if needs_write else 0.3)
                wrote += writes
                solved += rng.random() < {(True, True): 0.15, (True, False): 0.0, (False, True): 0.1,
                                          (False, False): 0.5}[(needs_write, writes)]
        n = tasks * group
        records.append({"step": step, WRITES: wrote / n, "reward/total_mean": solved / n})
    return RunLog(Path("simulated"), records)


def test_healthy_runs_rarely_fire_and_a_run_that_stops_writing_is_caught():
    """At the default 4 tasks × G = 8, 12 steps, where the task mix alone moves the write share
    by ~0.14 a step and the reward by ~0.09 (in opposite directions): no healthy run of 500 fires
    (2 × 4: ~5%); of the runs that stop writing at step 5, ~85% are caught, most at step 5 (the
    centred median can put it a step early) and the rest when the reward's noise lets it."""
    rng = random.Random(0)
    false_alarms = sum(check_doing_less(simulated_run(rng, 4, 8)) is not None for _ in range(500))
    assert false_alarms <= 5  # 1%
    caught = [check_doing_less(simulated_run(rng, 4, 8, stop_at=5)) for _ in range(100)]
    assert sum(f is not None for f in caught) >= 80
    assert sum(f is not None and 4 <= f.step <= 6 for f in caught) >= 60


# ---- a log the trainer's metric code wrote, from real airline episodes --------------------------------------
class Canceller:
    """Cancels the user's first reservation whatever they asked for: it acts (writes) on every task
    and breaks the ones that need no write, as a policy that writes too readily does."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self.turn = 0

    def act(self, observation: str) -> Action:
        self.turn += 1
        if self.turn == 1:
            return Action("get_user_details", {"user_id": self.task.user_id})
        if self.turn == 2:
            reservations = json.loads(observation).get("reservations", [])
            return Action("cancel_reservation", {"reservation_id": reservations[0] if reservations else "none"})
        return Action.respond("Done: your reservation is cancelled. Anything else?")


class Refuser:
    """Looks the user up, then refuses every request: right on the refusal and transfer tasks,
    wrong on the rest."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self.looked_up = False

    def act(self, observation: str) -> Action:
        if not self.looked_up:
            self.looked_up = True
            return Action("get_user_details", {"user_id": self.task.user_id})
        return Action.respond("I'm sorry, but I cannot do that under our policy.")


def log_episodes(run_dir: Path, agent_by_step, steps: int = 9, group: int = 2) -> Path:
    """Each step plays every training task ``group`` times with ``agent_by_step(step, episode, task)``
    and logs ``rollout_metrics`` of the batch (with the domain's write tools) as the trainer does."""
    config = small_env_config()
    bundle = build_env(config)
    tasks = bundle.tasks()
    tracker = JsonlTracker(run_dir / "metrics.jsonl")
    for step in range(1, steps + 1):
        batch = []
        for i, task in enumerate(tasks):
            for k in range(group):
                agent = agent_by_step(step, i * group + k, task, bundle, config)
                result = run_episode(make_env(bundle, task, config, user_seed=k), agent)
                batch.append(Trajectory(task.task_id, task.task_id, k, steps=result.steps,
                                        outcome_reward=result.reward, termination=result.termination))
        tracker.log(rollout_metrics(batch, write_tools(config)), step)
    tracker.close()
    return run_dir


def test_a_logged_run_of_real_episodes_that_learns_to_refuse_is_doing_less(tmp_path):
    """From step 5 more and more episodes refuse instead of cancelling (a quarter, half, all): the
    write share falls from 1.0 and the reward rises, since refusing solves the refusal and transfer
    tasks the cancelling broke. Replacing a policy that solves every task by the refuser loses
    reward as the writes fall: not doing less."""
    refused = {5: 0.25, 6: 0.5}

    def learns_to_refuse(step, episode, task, bundle, config):
        share = refused.get(step, 1.0 if step > 6 else 0.0)
        return Refuser(task) if episode % 4 < 4 * share else Canceller(task)

    run = log_episodes(tmp_path / "refuses", learns_to_refuse)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r[WRITES] for r in records][:4] == [1.0] * 4 and records[-1][WRITES] == 0.0
    assert records[-1]["reward/outcome_mean"] > records[0]["reward/outcome_mean"]
    found = {f.check: f for f in diagnose(run).findings}
    # scripted agents: every episode of a task ends alike, so group_saturation fires as well
    assert set(found) == {"doing_less", "group_saturation"} and found["doing_less"].step == 6

    def forgets_the_oracle(step, episode, task, bundle, config):
        share = refused.get(step, 1.0 if step > 6 else 0.0)
        return Refuser(task) if episode % 4 < 4 * share else domain_oracle(config, bundle, task)

    assert "doing_less" not in fired(log_episodes(tmp_path / "forgets", forgets_the_oracle))



def test_the_trainer_logs_the_write_shares(tiny_policy_dir, tmp_path):
    """Two tiny GRPO steps on the airline: every step's record carries both shares, and diagnose
    reads them (two steps are too few for a start)."""
    from helpers import fast_grpo_config

    from agentgrpo.train.grpo import GRPOTrainer

    GRPOTrainer(fast_grpo_config(tiny_policy_dir, tmp_path)).train()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    for r in records:
        assert 0 <= r["rollout/executed_write_episode_frac"] <= r[WRITES] <= 1
    assert "rollout/write_episode_frac: 2 step(s), too few" in diagnose(tmp_path).not_applicable["doing_less"]
