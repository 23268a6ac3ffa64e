"""AgentGRPOTrainer: two real TRL training steps of the tiny preset on CPU with LATA + LLDS,
checked against ``agentgrpo.algos`` on the very batch the loss saw."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("trl")
pytestmark = pytest.mark.trl

from datasets import Dataset  # noqa: E402

from agentgrpo.algos import get_advantage_estimator, llds_loss, policy_loss, preserve_token_count  # noqa: E402
from agentgrpo.integrations.trl import (  # noqa: E402
    AgentGRPOConfig,
    AgentGRPOTrainer,
    PRMLiteReward,
)

GROUP = 4  # num_generations
ROWS = 4  # per_device_train_batch_size (one optimizer step's rows)
LLDS_COEF = 0.2


def distinct_words(completions, **kwargs):
    """A second reward so that groups are never flat."""
    return [len(set(c[0]["content"].split())) / 10 for c in completions]


class RecordingTrainer(AgentGRPOTrainer):
    """Keeps copies of what each phase produced, for the checks below."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rewards, self.generated, self.logps, self.steps = [], [], [], []

    def _calculate_rewards(self, *args, **kwargs):
        rewards = super()._calculate_rewards(*args, **kwargs)
        self.rewards.append(rewards.clone())
        return rewards

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.generated.append(
            {k: v.clone() for k, v in output.items() if isinstance(v, torch.Tensor)}
        )
        return output

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        result = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if kwargs.get("compute_entropy"):  # the loss's forward (generation's has no entropy)
            self.logps.append(result[0].detach().clone())
        return result

    def _compute_loss(self, model, inputs):
        loss = super()._compute_loss(model, inputs)
        self.steps.append(
            (
                {k: v.detach().clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)},
                loss.detach().clone(),
            )
        )
        return loss


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """Tiny matrices: a second intra-op thread only adds contention on a shared 2-core box."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, bundle):
    from agentgrpo.policy.hf import build_policy
    from agentgrpo.policy.tokenizer import domain_corpus

    return build_policy(
        "tiny", domain_corpus(bundle.domain), tmp_path_factory.mktemp("tiny"), seed=0
    )


def _args(tmp_path, objective: dict | None = None, **overrides) -> AgentGRPOConfig:
    settings = dict(
        output_dir=str(tmp_path),
        per_device_train_batch_size=ROWS,
        num_generations=GROUP,
        steps_per_generation=2,
        gradient_accumulation_steps=1,
        max_completion_length=12,
        max_steps=2,
        learning_rate=1e-3,
        report_to="none",
        use_cpu=True,
        seed=0,
        save_strategy="no",
        disable_tqdm=True,
        logging_steps=1,
        objective={"kl_coef": 0.0, "adv_estimator": "lata", "llds_coef": LLDS_COEF, **(objective or {})},
    )
    settings.update(overrides)
    return AgentGRPOConfig(**settings)


def test_two_steps_with_lata_and_llds_match_algos(tmp_path, tiny, bundle):
    model, tokenizer = tiny
    prompts = [[{"role": "user", "content": task.instruction[:160]}] for task in bundle.tasks()[:4]]
    trainer = RecordingTrainer(
        model=model,
        processing_class=tokenizer,
        args=_args(tmp_path),
        reward_funcs=[PRMLiteReward(), distinct_words],
        train_dataset=Dataset.from_dict({"prompt": prompts}),
    )
    trainer.train()

    # advantages of the generation batch: the algos LATA estimator on TRL's summed rewards
    generated, rewards = trainer.generated[0], trainer.rewards[0].sum(dim=1)
    mask = generated["completion_mask"]
    group_ids = torch.arange(len(rewards)) // GROUP
    expected_adv = get_advantage_estimator("lata")(rewards, group_ids, mask).token
    assert generated["advantages"].shape == mask.shape
    assert torch.equal(generated["advantages"], expected_adv)

    # each step's loss: PPO-clip + λ·LLDS on the batch it saw, one optimizer step = ROWS rows;
    # LLDS is a token mean over that optimizer step's own preserve set (exact, not a share of
    # the generation batch's)
    assert len(trainer.steps) == len(trainer.logps) == 2
    llds_values = []
    for (inputs, loss), logps in zip(trainer.steps, trainer.logps, strict=False):
        step_mask, adv, old = (
            inputs["completion_mask"],
            inputs["advantages"],
            inputs["old_per_token_logps"],
        )
        pg, _ = policy_loss(
            logps, old, adv, step_mask, 0.2, 0.2, agg="seq-mean-token-sum", num_seqs=ROWS
        )
        preserve = inputs["window_num_preserve_tokens"]
        assert preserve == preserve_token_count(adv, step_mask) > 0  # one micro-batch per step
        assert inputs["window_num_tokens"] == step_mask.sum()
        llds, _ = llds_loss(logps, old, adv, step_mask, "action", num_tokens=preserve)
        assert torch.allclose(loss, pg + LLDS_COEF * llds, rtol=1e-6, atol=1e-7)
        llds_values.append(float(llds))
    # first slice: sampled by the current weights, nothing fell; second: after an update
    assert llds_values[0] == pytest.approx(0.0, abs=1e-6) and llds_values[1] > 0
    logged = [entry for entry in trainer.state.log_history if "loss/llds" in entry]
    assert [entry["loss/llds"] for entry in logged] == pytest.approx(
        llds_values, rel=1e-5, abs=1e-7
    )


def test_config_rejects_what_the_loss_does_not_implement(tmp_path):
    for objective, overrides, message in (
        ({}, {"scale_rewards": "batch"}, "scale_rewards"),
        ({"adv_estimator": "cubic"}, {}, "objective.adv_estimator='cubic'"),
        ({"adv_estimator": "grpo", "loss_agg": "token-mean"}, {}, "divides by the response length twice"),
        ({"adv_std_eps": 0.0}, {}, "objective.adv_std_eps"),
        ({"loss_agg": "mean"}, {}, "objective.loss_agg"),
        ({"entropy_coef": 0.01}, {}, "algo.entropy_coef=0.01: AgentGRPOTrainer has no entropy bonus"),
        ({"turn_credit_coef": 0.3}, {}, "per-turn PRM credit"),
        ({}, {"entropy_coef": 0.01}, "entropy_coef"),
        ({}, {"loss_type": "cispo"}, "PPO-clip"),
        ({"turn_discount_alpha": -1.0}, {}, "objective.turn_discount_alpha"),
        ({"bogus": 1}, {}, r"objective: unknown keys \['bogus'\]"),
        # TRL's own copies of the objective's values are written from it, never set beside it
        ({}, {"beta": 0.04}, "beta=0.04 contradicts objective kl_coef=0.0"),
        ({"norm_by_std": True}, {"scale_rewards": False}, "scale_rewards='none' contradicts objective norm_by_std"),
        # one update per generation batch: TRL drops old_per_token_logps, LLDS would be 0
        ({}, {"steps_per_generation": 1}, "objective.llds_coef=0.2 never acts.*num_iterations >= 2"),
    ):
        with pytest.raises(ValueError, match=message):
            _args(tmp_path, objective, **overrides)
    assert _args(tmp_path, {"norm_by_std": False}, scale_rewards=False).scale_rewards == "none"  # TRL's bool
    args = _args(tmp_path, {"clip_high": 0.28, "kl_coef": 0.02, "importance": "sequence"})
    assert (args.epsilon, args.epsilon_high, args.beta, args.importance_sampling_level) == (0.2, 0.28, 0.02, "sequence")
    assert args.objective_settings.llds_coef == LLDS_COEF and args.to_dict()["objective"]["clip_high"] == 0.28
