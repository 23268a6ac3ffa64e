"""Rollouts shared between runs (``trainer.shared_rollouts_dir``): a run that reads another
variant's first episodes trains exactly as if it had sampled them itself."""
from __future__ import annotations

import json

import torch
from helpers import SMALL_ENV_OVERRIDES
from safetensors.torch import load_file

from agentgrpo import metric_names as metric
from agentgrpo.agent.types import Trajectory, Turn
from agentgrpo.config import load_config
from agentgrpo.envs.types import Step
from agentgrpo.train.grpo import GRPOTrainer
from agentgrpo.train.grpo_config import GRPOConfig
from agentgrpo.train.shared_rollouts import SharedRollouts, digest_files


def _trajectory(task_id: str) -> Trajectory:
    step = Step(kind="respond", name="respond", arguments={"content": "hello"}, observation="hi")
    return Trajectory(task_id=task_id, group_id=f"0:0:{task_id}", steps=[step], turns=[Turn(0, 2, step)],
                      token_ids=[5, 6, 7], response_mask=[0, 1, 1], logprobs=[0.0, -0.25, -1e-7])


def test_the_second_reader_gets_the_first_samplers_episodes(tmp_path):
    calls = []

    def sample():
        calls.append(1)
        return [_trajectory("a"), _trajectory("b")]

    first = SharedRollouts(tmp_path, {"seed": 0})
    stored, read = first.get_or_sample(sample, step=0, generation_round=0, tasks=["a", "b"])
    assert not read and len(calls) == 1
    again, read = SharedRollouts(tmp_path, {"seed": 0}).get_or_sample(sample, step=0, generation_round=0,
                                                                      tasks=["a", "b"])
    assert read and len(calls) == 1 and again == stored
    assert again[0].turns[0].step is again[0].steps[0]  # the turn still points into its own steps
    # anything else in the key samples anew: another seed, step, round or task list
    for identity, parts in [({"seed": 1}, {"step": 0, "generation_round": 0, "tasks": ["a", "b"]}),
                            ({"seed": 0}, {"step": 1, "generation_round": 0, "tasks": ["a", "b"]}),
                            ({"seed": 0}, {"step": 0, "generation_round": 1, "tasks": ["a", "b"]}),
                            ({"seed": 0}, {"step": 0, "generation_round": 0, "tasks": ["b", "a"]})]:
        _, read = SharedRollouts(tmp_path, identity).get_or_sample(sample, **parts)
        assert not read
    assert len(calls) == 5
    assert not list(tmp_path.glob("*.tmp*"))  # entries are renamed into place whole


def test_a_checkpoint_is_identified_by_its_bytes(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "weights.bin").write_bytes(b"\x00\x01")
    (tmp_path / "model" / "tokenizer.json").write_text("{}")
    before = digest_files(tmp_path / "model")
    assert digest_files(tmp_path / "model") == before
    (tmp_path / "model" / "weights.bin").write_bytes(b"\x00\x02")
    assert digest_files(tmp_path / "model") != before
    assert digest_files(tmp_path / "model" / "weights.bin") != digest_files(tmp_path / "model" / "tokenizer.json")
    assert digest_files("tiny") == "name:tiny"  # a preset built from its config


def _config(policy_dir, run_dir, experiment: str, *overrides: str) -> GRPOConfig:
    """Two steps of 2 tasks × G = 4 under dynamic sampling; the process score in the reward
    gives the untrained policy's groups signal, so the first step moves the weights."""
    return load_config(GRPOConfig, [
        *SMALL_ENV_OVERRIDES, f"policy.init={policy_dir}", f"run_dir={run_dir}",
        f"experiment={experiment}", "reward.process_coef=0.3",
        "rollout.max_turns=2", "rollout.max_new_tokens=16", "rollout.max_total_tokens=900",
        "trainer.steps=2", "trainer.tasks_per_step=2", "trainer.group_size=4",
        "trainer.mini_batch_size=4", "trainer.micro_batch_size=2", "trainer.save_every=0",
        "trainer.dynamic_sampling=true", "trainer.max_generation_rounds=2", "trainer.informative_by=reward",
        "trainer.lr=1e-3", "logging.progress=false", *overrides,
    ], defaults="grpo.yaml")


def _records(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_run_that_reads_shared_rollouts_trains_as_if_it_had_sampled_them(tiny_policy_dir, tmp_path):
    shared = f"trainer.shared_rollouts_dir={tmp_path / 'shared'}"
    GRPOTrainer(_config(tiny_policy_dir, tmp_path / "joint", "joint", shared)).train()  # another variant samples
    reader = GRPOTrainer(_config(tiny_policy_dir, tmp_path / "llds", "llds", shared))
    reader.train()
    GRPOTrainer(_config(tiny_policy_dir, tmp_path / "alone", "llds")).train()

    first = _records(tmp_path / "joint")
    assert first[0][metric.ROLLOUT_SHARED_ROUNDS] == 0.0 and list((tmp_path / "shared").glob("*.pkl"))
    read, alone = _records(tmp_path / "llds"), _records(tmp_path / "alone")
    # step 1: every round read; step 2: the policy has moved, so it samples for itself
    assert read[0][metric.ROLLOUT_SHARED_ROUNDS] == read[0][metric.ROLLOUT_GENERATION_ROUNDS] >= 1
    assert read[1][metric.ROLLOUT_SHARED_ROUNDS] == 0.0
    assert not reader._policy_is_init

    def same(record: dict) -> dict:
        return {k: v for k, v in record.items() if not k.startswith("perf/") and k != metric.ROLLOUT_SHARED_ROUNDS}

    assert [same(r) for r in read] == [same(r) for r in alone]
    weights = load_file(tmp_path / "llds" / "final" / "model.safetensors")
    expected = load_file(tmp_path / "alone" / "final" / "model.safetensors")
    assert weights.keys() == expected.keys()
    assert all(torch.equal(weights[name], expected[name]) for name in weights)
    initial = load_file(tiny_policy_dir / "model.safetensors")
    assert any(not torch.equal(weights[name], initial[name]) for name in weights if name in initial)
