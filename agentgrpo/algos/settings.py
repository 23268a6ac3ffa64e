"""The GRPO objective's settings: one frozen dataclass every trainer takes whole.

:class:`ObjectiveSettings` holds what defines the objective — the advantage estimator and
its knobs, the PPO clip, the policy-gradient aggregation, the KL, LLDS and entropy terms —
with their only defaults. The native trainer reads it as the ``algo`` section of its
config, the TRL subclass takes it as ``AgentGRPOConfig(objective=...)``, and the veRL
plugin receives it as one serialized value; each host translates it into its own knobs
and never redeclares a field. Hosts call :meth:`ObjectiveSettings.loss_kwargs` for
``grpo_objective`` and :meth:`ObjectiveSettings.estimator_kwargs` for an estimator, and
validate it once with :meth:`ObjectiveSettings.check`, naming settings in their own
spelling (``key_format``), as :func:`check_loss_pairing` does.

:func:`updates_per_rollout` is the one count of optimizer steps per rollout batch, and
:meth:`ObjectiveSettings.llds_acts` the one rule that LLDS needs more than one of them:
the first update after a rollout sees old log-probs equal to the current ones, where the
LLDS penalty is exactly 0 (``llds``; the LLD paper, arXiv:2512.04220).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentgrpo.algos.advantages import DISCOUNT_UNITS, DiscountUnit
from agentgrpo.algos.llds import GATES, Gate
from agentgrpo.algos.losses import AGG_MODES, DEFAULT_LOSS_AGG, IMPORTANCE_LEVELS, KL_KINDS, AggMode, Importance, KLKind
from agentgrpo.algos.registry import PRESETS, advantage_estimator_names, check_loss_pairing


def updates_per_rollout(rollout_size: int, mini_batch_size: int, epochs: int) -> int:
    """Optimizer steps per rollout batch: ``epochs`` × mini-batches of ``mini_batch_size``.

    Both sizes count the same unit (trajectories natively, prompts in veRL, micro-batches
    in TRL); a mini-batch as large as the rollout or larger is one mini-batch.
    """
    return epochs * max(1, rollout_size // max(1, mini_batch_size))


@dataclass(frozen=True)
class ObjectiveSettings:
    """``L = L_pg + β·KL + λ·L_LLDS − c_H·H`` on the advantages of ``adv_estimator`` (DESIGN §3)."""

    adv_estimator: str = "grpo"
    """A name of the advantage-estimator registry (``agentgrpo.algos.advantage_estimator_names()``;
    the presets are listed in ``agentgrpo.algos.PRESETS``)."""
    norm_by_std: bool = True
    """Divide group-centred rewards by the group std (GRPO); False = Dr. GRPO."""
    adv_std_eps: float = 1e-6
    """ε in A = (R − mean) / (std + ε). Raising it (e.g. 0.1) keeps groups whose rewards
    differ only by the process score (all episodes succeed, or all fail) from being scaled
    up to unit advantages, so PRM-Lite acts as a tie-breaker (docs/results/grpo-tuning.md)."""
    turn_discount_alpha: float | None = None
    """α of Turn-Discount weights α^(L−1−k); None uses the estimator's default (1.05 where it applies)."""
    turn_discount_unit: DiscountUnit = "token"
    """What Turn-Discount counts (DESIGN §3.3): ``token`` (the k-th of the L response tokens
    gets α^(L−1−k)) or ``turn`` (every token of assistant turn j of J gets α^(J−1−j): the
    per-turn discount). Only the turn_discount estimators discount."""
    turn_credit_coef: float = 0.0
    """β of per-turn PRM credit (DESIGN §3.4, prm_credit: turn); 0 disables it."""
    clip_low: float = 0.2
    """PPO clip ε below 1."""
    clip_high: float = 0.2
    """PPO clip ε above 1 (DAPO's clip-higher when larger than clip_low)."""
    loss_agg: AggMode = DEFAULT_LOSS_AGG
    """How the per-token policy-gradient loss becomes a scalar (veRL's loss_agg_mode meanings);
    with A/L in the advantage, seq-mean-token-sum is GRPO's seq-mean-token-mean."""
    importance: Importance = "token"
    """Token-level PPO ratio, or GSPO's sequence-level ratio."""
    kl_coef: float = 0.01
    """β_kl of the KL-to-reference loss term (the seed: 0.01); 0 skips the reference model."""
    kl_kind: KLKind = "k3"
    """KL estimator (k3 = veRL's low_var_kl)."""
    llds_coef: float = 0.0
    """λ of the LLDS likelihood-preserving regulariser (0.2 in the LLD paper)."""
    llds_gate: Gate = "action"
    """LLDS gate granularity."""
    entropy_coef: float = 0.0
    """Entropy bonus coefficient (0 = only logged)."""
    advantage_sign: int = 1
    """Debug control, never for training: -1 negates every advantage the estimator returns
    (token and sequence), so the policy is pushed away from what was rewarded. The
    ``negated`` arm of ``agentgrpo sanity`` uses it to show that learning needs the sign."""

    def loss_kwargs(self) -> dict[str, Any]:
        """The settings keyword arguments of ``grpo_objective``."""
        return {"clip_low": self.clip_low, "clip_high": self.clip_high, "loss_agg": self.loss_agg,
                "importance": self.importance, "kl_coef": self.kl_coef, "kl_kind": self.kl_kind,
                "llds_coef": self.llds_coef, "llds_gate": self.llds_gate, "entropy_coef": self.entropy_coef}

    def estimator_kwargs(self) -> dict[str, Any]:
        """The settings keyword arguments of a registry estimator (see ``registry``)."""
        return {"norm_by_std": self.norm_by_std, "turn_discount_alpha": self.turn_discount_alpha,
                "turn_discount_unit": self.turn_discount_unit, "turn_credit_coef": self.turn_credit_coef,
                "eps": self.adv_std_eps}

    def llds_acts(self, updates: int) -> bool:
        """LLDS is identically 0 unless λ > 0 and the policy moves between the old log-probs
        and an update, i.e. more than one optimizer step per rollout batch."""
        return self.llds_coef > 0 and updates > 1

    def check(self, *, updates: int | None = None, key_format: str = "{}",
              more_updates: str = "more mini-batches or PPO epochs per rollout") -> None:
        """Refuse a value out of range, a choice that does not exist, or settings that contradict
        each other; with ``updates`` (:func:`updates_per_rollout`), also λ > 0 that never acts.

        ``key_format`` spells a field as the host names it (``"algo.{}"`` natively), and
        ``more_updates`` says how the host gets more than one update per rollout, so the
        message names what to change there.

        Raises:
            ValueError: one line naming the setting, its value and what is allowed.
        """
        def require(ok: bool, name: str, allowed: str) -> None:
            if not ok:
                raise ValueError(f"{key_format.format(name)}={getattr(self, name)!r} is invalid: {allowed}")

        require(self.advantage_sign in (1, -1), "advantage_sign", "must be 1 or -1 (a debug control: -1 negates "
                "every advantage)")
        names = advantage_estimator_names()
        require(self.adv_estimator in names, "adv_estimator", f"must be one of {names}")
        for name, choices in (("turn_discount_unit", DISCOUNT_UNITS), ("loss_agg", AGG_MODES),
                              ("importance", IMPORTANCE_LEVELS), ("kl_kind", KL_KINDS), ("llds_gate", GATES)):
            require(getattr(self, name) in choices, name, f"must be one of {list(choices)}")
        require(self.adv_std_eps > 0, "adv_std_eps", "must be > 0")
        alpha = self.turn_discount_alpha
        require(alpha is None or alpha > 0, "turn_discount_alpha", "must be > 0 (or null)")
        preset = PRESETS.get(self.adv_estimator)
        require(self.turn_discount_unit == "token" or preset is None or preset.turn_discount, "turn_discount_unit",
                f"has no effect with {key_format.format('adv_estimator')}={self.adv_estimator}, which does not "
                f"discount: set {key_format.format('adv_estimator')}=turn_discount (or turn_discount_lata), or "
                f"{key_format.format('turn_discount_unit')}=token")
        require(0 < self.clip_low < 1, "clip_low", "must be in (0, 1): the ratio is clipped below at 1 - clip_low")
        require(self.clip_high > 0, "clip_high", "must be > 0")
        for name in ("turn_credit_coef", "kl_coef", "llds_coef", "entropy_coef"):
            require(getattr(self, name) >= 0, name, "must be >= 0")
        check_loss_pairing(self.adv_estimator, self.loss_agg, estimator_key=key_format.format("adv_estimator"),
                           loss_agg_key=key_format.format("loss_agg"))
        if updates is not None and self.llds_coef > 0 and not self.llds_acts(updates):
            raise ValueError(
                f"{key_format.format('llds_coef')}={self.llds_coef} never acts: with one update per rollout the old "
                f"log-probs equal the current ones, where LLDS is 0; {more_updates} (or "
                f"{key_format.format('llds_coef')}=0)")
