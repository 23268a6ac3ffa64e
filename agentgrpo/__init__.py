"""agentgrpo: stable GRPO for long-horizon, multi-turn, multi-tool LLM agents.

Subpackages: ``algos`` (pure torch math), ``rewards`` (outcome + PRM-Lite),
``envs`` (the airline domain, user simulators), ``agent`` (chat format and
trajectory types), ``policy`` (model backends), ``rollout`` (batched multi-turn
episodes), ``train`` (SFT, GRPO), ``eval`` (pass^k), ``integrations`` (veRL, TRL).
"""

__version__ = "0.1.0"
