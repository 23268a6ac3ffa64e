"""TRL trains on airline episodes: two real GRPO steps of the tiny policy on CPU with the
scripted customer, through ``examples/trl/train_airline.py``'s ``train`` (the code
docs/scale.md shows)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")
pytestmark = pytest.mark.trl

from agentgrpo.envs.airline.factory import EnvConfig, SplitConfig, build_env  # noqa: E402
from agentgrpo.envs.types import CUT_OFF  # noqa: E402
from agentgrpo.integrations.host_settings import load_native  # noqa: E402
from agentgrpo.integrations.trl import airline_dataset  # noqa: E402
from agentgrpo.policy.hf import load_policy  # noqa: E402
from agentgrpo.rewards import PRMLite, parse_messages  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "trl" / "train_airline.py"
ENV = EnvConfig(n_tasks=12, splits=SplitConfig(covered_seen=4, uncovered_seen=4, unseen=4))
ENV_OVERRIDES = ["env.n_tasks=12", "env.splits.covered_seen=4", "env.splits.uncovered_seen=4", "env.splits.unseen=4"]
PRM_COEF = 0.3


def load_example():
    spec = importlib.util.spec_from_file_location("train_airline", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def regrade(bundle, task_id: str, transcript: list[dict]) -> float:
    """The grader's reward of a transcript: its tool calls replayed on a fresh database."""
    domain, task = bundle.domain, bundle.task_by_id(task_id)
    state, replies = domain.new_state(), []
    for step in parse_messages(transcript).steps:
        if step.kind == "tool":
            domain.execute(state, step.name, step.arguments)
        elif step.kind == "respond":
            replies.append(step.arguments.get("content", ""))
    return float(domain.grade(state, task, replies).reward)


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_two_grpo_steps_on_airline_episodes(tiny_policy_dir, tmp_path):
    before = {k: v.clone() for k, v in load_policy(tiny_policy_dir)[0].state_dict().items()}
    # joint_llds (A/√L, λ = 0.2, outcome + 0.3·PRM-Lite) with 2 tasks × 4 episodes, 2 updates per rollout;
    # 6-token turns: replies around PRM-Lite's 30-character "terse" line, so the process score varies
    config = load_native([
        "experiment=joint_llds", "trainer.group_size=4", "trainer.tasks_per_step=2", "trainer.mini_batch_size=4",
        "trainer.micro_batch_size=4", "algo.kl_coef=0", "rollout.max_turns=3", "rollout.max_new_tokens=6",
        "rollout.max_total_tokens=4096", "rollout.temperature=1.0", *ENV_OVERRIDES])
    assert config.env == ENV and config.reward.process_coef == PRM_COEF and config.updates_per_rollout == 2
    trainer = load_example().train(
        str(tiny_policy_dir), str(tmp_path), config, steps=2, splits=("uncovered_seen",),
        learning_rate=1e-3, logging_steps=1, disable_tqdm=True, seed=0)

    after = trainer.model.state_dict()
    assert any(not torch.equal(before[k], after[k].detach().cpu()) for k in before), "no weight moved"

    episodes = trainer.rollout_func.last  # the one generation batch of the two steps (steps_per_generation=2)
    assert len(episodes) == 8 and len({t.task_id for t in episodes}) == 2
    assert all(t.turns and t.messages[0]["role"] == "system" for t in episodes)
    bundle = build_env(ENV)
    # a cut-off episode (3 turns ran out) scores 0 whatever its database, as in τ-bench
    outcomes = [0.0 if t.termination in CUT_OFF else regrade(bundle, t.task_id, t.messages) for t in episodes]
    assert outcomes == [t.outcome_reward for t in episodes]
    prm = [PRM_COEF * PRMLite().score_messages(t.messages).process_score for t in episodes]

    logged = next(entry for entry in trainer.state.log_history if "rewards/outcome_reward/mean" in entry)
    assert logged["rewards/outcome_reward/mean"] == pytest.approx(sum(outcomes) / len(outcomes))
    assert logged["rewards/prm_lite/mean"] == pytest.approx(sum(prm) / len(prm), abs=1e-6)
    assert logged["airline/turns_mean"] == pytest.approx(sum(len(t.turns) for t in episodes) / len(episodes))
    # real grades: the refusal task's database is right at the cap, but a cut-off episode scores 0
    cut = [t for t in episodes if t.termination in CUT_OFF]
    assert any(t.info["grade"]["reward_at_cut"] == 1.0 and t.outcome_reward == 0.0 for t in cut)
    assert any(entry.get("loss/llds", 0) != 0 for entry in trainer.state.log_history)  # 2nd update: LLDS acts


def test_dataset_rows_are_the_training_tasks():
    bundle = build_env(ENV)
    rows = airline_dataset(bundle).to_list()
    assert [r["prompt"] for r in rows] == [t.task_id for t in bundle.tasks(["covered_seen", "uncovered_seen"])]
    assert {r["split"] for r in rows} == {"covered_seen", "uncovered_seen"}


def test_the_docs_show_the_example_code():
    """docs/scale.md's TRL example is the example's `train` function, verbatim."""
    source = EXAMPLE.read_text()
    code = re.search(r"# --8<-- \[start:train\]\n(.*?)# --8<-- \[end:train\]", source, re.S).group(1)
    docs = (ROOT / "docs" / "scale.md").read_text()
    assert code.strip() in docs


def test_the_example_leaves_a_checkpoint_agentgrpo_eval_takes(tiny_policy_dir, tmp_path):
    """``--out DIR`` ends with ``DIR/final``; TRL's own flags pass through (``--logging_steps``, ...),
    those the experiment sets (``--beta``) are refused naming the native key."""
    from agentgrpo.eval.cli import load_eval_config
    from agentgrpo.eval.evaluator import evaluate

    example = load_example()
    env = ENV_OVERRIDES
    out = tmp_path / "trl"
    with pytest.raises(SystemExit, match=r"beta \(set algo.kl_coef=...\)"):
        example.main(["--model", str(tiny_policy_dir), "--out", str(out), "--beta", "0", *env])
    assert example.main([
        "--model", str(tiny_policy_dir), "--out", str(out), "--steps", "1", "experiment=vanilla",
        "trainer.group_size=2", "trainer.tasks_per_step=2", "trainer.mini_batch_size=4", "trainer.micro_batch_size=4",
        "rollout.max_turns=2", "rollout.max_new_tokens=6", "rollout.max_total_tokens=2048",
        "rollout.temperature=0.9", "algo.kl_coef=0", *env, "--logging_steps", "1", "--disable_tqdm", "true"]) == 0
    final = out / "final"
    assert (final / "agentgrpo.json").is_file() and (final / "model.safetensors").is_file()
    report = evaluate(load_eval_config([
        f"policy.init={final}", f"out_dir={tmp_path / 'eval'}", "trials=1", "rollout.max_turns=2",
        "rollout.max_new_tokens=6", "progress=false", *env]))
    assert report.metrics["episodes"] == 12
    # the flags TRL spells its own way reach AgentGRPOConfig, typed; sampling temperature = scoring's
    assert example.trl_flags(["--beta", "0.01", "--logging_steps=2"], str(out)) == {"beta": 0.01, "logging_steps": 2}
    with pytest.raises(SystemExit, match="unknown options"):
        example.trl_flags(["--bogus", "1"], str(out))
