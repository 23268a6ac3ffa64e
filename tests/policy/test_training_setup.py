"""The training setup of a policy: gradient checkpointing and LoRA change nothing the forward computes."""
from __future__ import annotations

import pytest
import torch

from agentgrpo.policy.device import enable_gradient_checkpointing
from agentgrpo.policy.forward import PolicyForward
from agentgrpo.policy.hf import load_policy
from agentgrpo.policy.settings import LoraConfig

IDS = torch.tensor([[3, 17, 99, 230, 7, 45, 12, 8, 301, 5], [3, 17, 99, 230, 7, 45, 60, 61, 0, 0]])
MASK = torch.tensor([[1] * 10, [1] * 8 + [0, 0]])
SCORE = torch.tensor([[0] * 5 + [1] * 5, [0] * 5 + [1] * 3 + [0, 0]], dtype=torch.float32)


def scores_and_grads(model, **kwargs):
    model.zero_grad(set_to_none=True)
    model.train()
    logprobs = PolicyForward(model, min_shared=2, **kwargs).token_logprobs(IDS, MASK, SCORE).logprobs
    logprobs.sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logprobs.detach(), grads


def test_gradient_checkpointing_gives_the_same_scores_and_gradients(tiny_policy_dir):
    model, _ = load_policy(tiny_policy_dir)
    plain, plain_grads = scores_and_grads(model)
    enable_gradient_checkpointing(model)
    assert model.model.gradient_checkpointing
    checkpointed, grads = scores_and_grads(model)
    torch.testing.assert_close(checkpointed, plain)
    assert grads.keys() == plain_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, plain_grads[name], atol=1e-5, rtol=1e-4)  # shared prefix or not


def test_the_forward_of_a_lora_model_is_its_peft_forward(tiny_policy_dir):
    pytest.importorskip("peft")
    from agentgrpo.policy.lora import attach_lora

    model, _ = load_policy(tiny_policy_dir)
    lora = attach_lora(model, LoraConfig(rank=4, dropout=0.0), tiny_policy_dir)
    with torch.no_grad():  # B = 0 at the start: the adapters add nothing yet; give them a value
        for name, param in lora.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    ours, grads = scores_and_grads(lora)
    assert grads and all("lora_" in name for name in grads)  # only the adapters train
    with torch.no_grad():
        logits = lora(input_ids=IDS, attention_mask=MASK).logits.float()
    expected = torch.log_softmax(logits[:, :-1], -1).gather(-1, IDS[:, 1:, None])[..., 0] * SCORE[:, 1:]
    torch.testing.assert_close(ours[:, 1:], expected, atol=1e-5, rtol=1e-5)
