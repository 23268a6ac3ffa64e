"""What ``agentgrpo sft`` and ``agentgrpo train`` check on the machine before building a model.

The environment's data and LLM user, the starting policy and its device, PRM-Lite's weights
file and the trackers' packages (the generic checks are ``agentgrpo.preflight``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from agentgrpo.config import ConfigError
from agentgrpo.envs.preflight import preflight_env
from agentgrpo.policy.preflight import check_policy_source, check_training_policy
from agentgrpo.preflight import check_file, check_trackers_installed, check_writable_dir
from agentgrpo.rewards.config import PRMLiteConfig
from agentgrpo.train.sft_config import SFTConfig

if TYPE_CHECKING:  # an annotation only: the GRPO settings import torch, and the checks run before it loads
    from agentgrpo.train.grpo_config import GRPOConfig

SFT_HINT = "run `agentgrpo sft` first (it writes runs/sft/final) or set policy.init=DIR"


def check_prm_weights(path: str, key: str = "reward.prm_weights") -> None:
    """The file exists and parses as a PRM-Lite config (its own checks name the rule)."""
    check_file(path, key, "point it at a PRM-Lite YAML (see agentgrpo/rewards/prm_lite.yaml) or remove it")
    try:
        PRMLiteConfig.from_yaml(path)
    except Exception as e:  # a YAML syntax error or a bad rule weight: the message says which
        raise ConfigError(f"{key}: {path} is not a valid PRM-Lite config ({' '.join(str(e).split())})") from None


def preflight_sft(config: SFTConfig) -> None:
    preflight_env(config.env)
    check_policy_source(config.policy.init, "policy.init", "set policy to a preset, a checkpoint directory or a "
                        "Hub id", allow_built=True)
    check_training_policy(config.policy)
    check_trackers_installed(config.logging.trackers, "logging.trackers")


def preflight_grpo(config: GRPOConfig, *, check_init: bool = True) -> None:
    """``check_init=False`` when the starting checkpoint is made earlier in the same job (quickstart)."""
    preflight_env(config.env)
    check_training_policy(config.policy)
    if check_init:
        check_policy_source(config.policy.init, "policy.init", SFT_HINT)
    if config.reward.prm_weights:
        check_prm_weights(config.reward.prm_weights)
    check_trackers_installed(config.logging.trackers, "logging.trackers")
    check_writable_dir(config.run_dir, "run_dir")
    if config.trainer.shared_rollouts_dir is not None:
        check_writable_dir(config.trainer.shared_rollouts_dir, "trainer.shared_rollouts_dir")
