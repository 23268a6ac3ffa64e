"""Small, fast settings shared by the training, rollout and quickstart tests."""
from __future__ import annotations

SMALL_ENV_OVERRIDES = [
    "env.n_tasks=12",
    "env.splits.covered_seen=4",
    "env.splits.uncovered_seen=4",
    "env.splits.unseen=4",
]


def small_env_config(**overrides):
    from agentgrpo.envs.airline.factory import EnvConfig, SplitConfig

    return EnvConfig(n_tasks=12, splits=SplitConfig(covered_seen=4, uncovered_seen=4, unseen=4), **overrides)


def fast_grpo_config(policy_dir, run_dir, *overrides: str):
    """Two tiny GRPO steps of 2 tasks × G = 2 with short turns: the trainer tests' config."""
    from agentgrpo.config import load_config
    from agentgrpo.train.grpo_config import GRPOConfig

    return load_config(GRPOConfig, [
        *SMALL_ENV_OVERRIDES,
        f"policy.init={policy_dir}", f"run_dir={run_dir}",
        "rollout.max_turns=2", "rollout.max_new_tokens=8", "rollout.max_total_tokens=900",
        "trainer.steps=2", "trainer.tasks_per_step=2", "trainer.group_size=2",
        "trainer.mini_batch_size=2", "trainer.micro_batch_size=1", "trainer.save_every=0",
        "trainer.lr=1e-3", "logging.progress=false", *overrides,
    ], defaults="grpo.yaml")


def objective(*args, **kwargs):
    """``grpo_objective`` with ``ObjectiveSettings``' defaults, KL off, for the settings not given."""
    from agentgrpo.algos import ObjectiveSettings, grpo_objective

    names = ObjectiveSettings().loss_kwargs()
    settings = {key: kwargs.pop(key) for key in list(kwargs) if key in names}
    return grpo_objective(*args, **ObjectiveSettings(**{"kl_coef": 0.0, **settings}).loss_kwargs(), **kwargs)


def export_objective(monkeypatch, **fields) -> None:
    """Export ``ObjectiveSettings(**fields)`` as the veRL plugins read it (``AGENTGRPO_OBJECTIVE``)."""
    from agentgrpo.algos import ObjectiveSettings
    from agentgrpo.integrations.verl.settings import OBJECTIVE_ENV, objective_json

    monkeypatch.setenv(OBJECTIVE_ENV, objective_json(ObjectiveSettings(**fields)))
