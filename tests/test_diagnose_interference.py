"""agentgrpo.diagnose.interference: a GRPO step's gradient split into its write and no-write parts."""
from __future__ import annotations

import pytest
import torch
from helpers import fast_grpo_config

from agentgrpo.agent.types import Trajectory, Turn
from agentgrpo.diagnose.interference import Probe, attribute, backward_part, first_write_probe, probe_logprob
from agentgrpo.envs.types import Step
from agentgrpo.train.batch import collate
from agentgrpo.train.grpo import GRPOTrainer

WRITES = frozenset({"cancel_reservation"})
CANCEL = Step("tool", "cancel_reservation", {"reservation_id": "R1"}, '{"status": "cancelled"}')
READ = Step("tool", "get_reservation_details", {"reservation_id": "R1"}, "{}")
REPLY = Step("respond", "respond", {"content": "x"}, "ok", text="x")


def episode(task: str, index: int, prompt: list[int], turns: list[tuple[list[int], Step]], reward: float,
            between: int = 30) -> Trajectory:
    """An episode of ``turns`` (tokens, step) with one observation token ``between`` them."""
    traj = Trajectory(task_id=task, group_id=task, sample_index=index, token_ids=list(prompt),
                      response_mask=[0] * len(prompt), outcome_reward=reward)
    for number, (tokens, step) in enumerate(turns):
        if number:
            traj.token_ids.append(between)
            traj.response_mask.append(0)
        traj.turns.append(Turn(len(traj.token_ids), len(traj.token_ids) + len(tokens), step))
        traj.token_ids += tokens
        traj.response_mask += [1] * len(tokens)
        traj.steps.append(step)
    traj.logprobs = [0.0] * len(traj.token_ids)
    traj.info["total_reward"] = reward
    return traj


def two_tasks() -> list[Trajectory]:
    """A write task (its group: a cancel that succeeded, a reply that did not) and a no-write task
    (a refusal that succeeded, a cancel that did not)."""
    return [episode("w", 0, [5, 6, 7], [([9, 10], READ), ([11, 12, 13], CANCEL)], 1.0),
            episode("w", 1, [5, 6, 7], [([9, 10], READ), ([14, 15], REPLY)], 0.0),
            episode("n", 0, [5, 6, 20], [([9, 10], READ), ([16, 17], REPLY)], 1.0),
            episode("n", 1, [5, 6, 20], [([9, 10], READ), ([11, 12, 13], CANCEL)], 0.0)]


def probes() -> list[Probe]:
    found = [first_write_probe(t, WRITES) for t in (
        episode("w", 2, [5, 6, 7], [([9, 10], READ), ([11, 12, 13], CANCEL)], 1.0),
        episode("x", 0, [5, 6, 21, 22], [([11, 12, 18], CANCEL), ([14, 15], REPLY)], 1.0))]
    return [p for p in found if p is not None]


def trainer_for(tiny_policy_dir, tmp_path, *overrides: str) -> GRPOTrainer:
    return GRPOTrainer(fast_grpo_config(tiny_policy_dir, tmp_path, "experiment=vanilla", "trainer.lr=1e-2",
                                        "trainer.micro_batch_size=1", *overrides))


def test_first_write_probe_is_the_span_of_the_first_write_call():
    traj = episode("w", 0, [5, 6, 7], [([9, 10], READ), ([11, 12, 13], CANCEL), ([14], CANCEL)], 1.0)
    probe = first_write_probe(traj, WRITES)
    assert (probe.start, probe.end) == (6, 9) and traj.token_ids[6:9] == [11, 12, 13]
    assert first_write_probe(episode("n", 0, [5], [([9], READ), ([14], REPLY)], 1.0), WRITES) is None


def test_the_parts_add_up_to_the_step_and_the_first_order_change_predicts_a_small_step(tiny_policy_dir, tmp_path):
    trainer = trainer_for(tiny_policy_dir, tmp_path, "algo.kl_coef=0.05")
    trajectories, found = two_tasks(), probes()
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    report = attribute(trainer, trajectories, {"w"}, found)
    assert report.rows == {"write": 2, "no_write": 2, "all": 4}
    assert report.additivity_error < 1e-5
    for k, v in trainer.model.state_dict().items():  # the measurement leaves the policy as it was
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)
    # first order: the parts add up too (float32 dot products of parts that nearly cancel)
    assert all(abs(w + n - a) <= 1e-4 * max(abs(w), abs(n)) for w, n, a in
               zip(report.first_order["write"], report.first_order["no_write"], report.first_order["all"]))
    assert all(-1.0 <= c <= 1.0 for part in ("write", "no_write") for c in report.cosine[part])

    # a plain gradient step of size eta along the no-write part moves each probe by eta * first_order
    batch, _ = trainer.compute_advantages(trajectories)
    trainer.compute_old_logprobs(batch, trainer.plan_updates(batch, 0))
    from agentgrpo.train.grpo import mini_batch_counts
    backward_part(trainer, batch, [2, 3], mini_batch_counts(batch, [0, 1, 2, 3]))
    probes_batch = collate([p.trajectory for p in found], trainer.groups.chat.pad_token_id)
    start = [probe_logprob(trainer, probes_batch, i, p) for i, p in enumerate(found)]
    eta = 1e-4
    with torch.no_grad():
        for param in trainer.model.parameters():
            if param.grad is not None:
                param -= eta * param.grad
    moved = [probe_logprob(trainer, probes_batch, i, p) - s for i, (p, s) in enumerate(zip(found, start))]
    for got, predicted in zip(moved, report.first_order["no_write"]):
        assert got == pytest.approx(eta * predicted, rel=0.05, abs=1e-6)
    # the no-write group pushes the cancel down: its cancel episode failed, its reply succeeded
    assert all(value < 0 for value in report.first_order["no_write"])
    assert all(value > 0 for value in report.first_order["write"])


def test_the_adam_change_is_the_trainers_one_step_on_the_part(tiny_policy_dir, tmp_path):
    trainer = trainer_for(tiny_policy_dir, tmp_path, "algo.kl_coef=0", "trainer.mini_batch_size=2",
                          "trainer.tasks_per_step=1")
    trajectories, found = two_tasks(), probes()
    report = attribute(trainer, trajectories, {"w"}, found)
    # the trainer's own update on the write task's group alone (one mini-batch of its 2 episodes, fresh AdamW)
    batch, _ = trainer.compute_advantages(trajectories[:2])
    plan = trainer.plan_updates(batch, 0)
    trainer.compute_old_logprobs(batch, plan)
    probes_batch = collate([p.trajectory for p in found], trainer.groups.chat.pad_token_id)
    start = [probe_logprob(trainer, probes_batch, i, p) for i, p in enumerate(found)]
    trainer.update(batch, plan)
    moved = [probe_logprob(trainer, probes_batch, i, p) - s for i, (p, s) in enumerate(zip(found, start))]
    # the same step: the group's advantages do not depend on the other group, and AdamW's first step
    # is scale-free, so the write part's denominators (the whole batch's) do not change it
    for got, measured in zip(moved, report.adam["write"]):
        assert got == pytest.approx(measured, rel=1e-3, abs=1e-5)
    assert all(value > 0 for value in report.adam["write"])
    summary = report.summary()
    assert summary["probes"] == 2 and summary["adam"]["write"]["lowered_frac"] == 0.0


def test_no_probe_is_refused(tiny_policy_dir, tmp_path):
    trainer = trainer_for(tiny_policy_dir, tmp_path)
    with pytest.raises(ValueError, match="no probe"):
        attribute(trainer, two_tasks(), {"w"}, [])
