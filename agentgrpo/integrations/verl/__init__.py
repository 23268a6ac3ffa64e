"""agentgrpo as a veRL plugin: importing this package registers everything into veRL.

veRL's registries are per-process dicts, so the plugin must be imported in the driver
*and* in every Ray worker. Two ways, both importing this package from ``import verl``:

* veRL ≥ 0.9: the ``verl.plugins`` entry point that ``pip install agentgrpo[verl]``
  declares (``agentgrpo = "agentgrpo.integrations.verl"``), loaded automatically;
* veRL 0.6–0.8: ``VERL_USE_EXTERNAL_MODULES=agentgrpo.integrations.verl``, forwarded to
  the workers with ``+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=...``
  (the launch scripts in ``examples/verl/`` do both).

What gets registered (names chosen in the veRL config):

* every advantage estimator of the ``agentgrpo.algos`` registry as ``agentgrpo_<name>``
  (``agentgrpo_grpo``, ``agentgrpo_lata``, ``agentgrpo_turn_discount``,
  ``agentgrpo_turn_discount_lata``, ``agentgrpo_dr_grpo``; ``algorithm.adv_estimator``;
  see ``estimators``);
* the policy loss ``agentgrpo_llds``, the one objective (``actor.policy_loss.loss_mode``;
  see ``losses``).

The reward function (``reward.compute_score``, via ``custom_reward_function.path``) and
the airline agent loop (``agent_loop.AirlineAgentLoop``, via ``configs/agent_loop.yaml``)
are loaded by path and need no registration. Importing this package twice, or after a
reload, registers nothing new; registering a *different* function under one of our
names (another plugin) raises veRL's own ValueError.

Supported veRL versions: 0.6.1 to 0.9.x (tested against 0.9.1; pinned ``>=0.6.1,<0.10``).
Without veRL the package still imports (registering nothing; ``register()`` then raises),
so the task-file preparation, which needs only pyarrow, runs anywhere.
"""

from __future__ import annotations

try:
    from verl.trainer.ppo import core_algos as _core_algos
except ImportError:  # without veRL: the data preparation (``data``, ``agentgrpo verl-prepare``) still works
    _core_algos = None

from agentgrpo.integrations.verl.estimators import verl_estimators
from agentgrpo.integrations.verl.losses import agentgrpo_llds

POLICY_LOSSES = {"agentgrpo_llds": agentgrpo_llds}

SUPPORTED_VERL = ">=0.6.1,<0.10"


def _ours(fn: object) -> bool:
    """Registered by (some import of) this package, e.g. before an ``importlib.reload``."""
    return getattr(fn, "__module__", "").startswith("agentgrpo.integrations.verl")


def register() -> list[str]:
    """Register our estimators and loss into veRL's registries; returns the names added."""
    if _core_algos is None:
        raise ImportError("agentgrpo.integrations.verl needs veRL to register its plugins: "
                          "pip install 'agentgrpo[verl]'")
    added = []
    for name, fn in verl_estimators().items():
        if not _ours(_core_algos.ADV_ESTIMATOR_REGISTRY.get(name)):
            _core_algos.register_adv_est(name)(fn)
            added.append(name)
    for name, fn in POLICY_LOSSES.items():
        existing = _core_algos.POLICY_LOSS_REGISTRY.get(name)
        if existing is not None and not _ours(existing):
            # veRL's register_policy_loss silently overwrites: refuse, like its estimator registry
            raise ValueError(f"policy loss {name} is already registered by {existing!r}")
        if existing is None:
            _core_algos.register_policy_loss(name)(fn)
            added.append(name)
    return added


if _core_algos is not None:
    register()

__all__ = ["POLICY_LOSSES", "SUPPORTED_VERL", "agentgrpo_llds", "register"]
