"""PolicyForward: sparse head and shared-prefix broadcast equal the plain forward, grads too."""
from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from agentgrpo.policy.forward import PolicyForward, shared_prefix_length
from agentgrpo.policy.presets import get_preset


@pytest.fixture()
def batch():
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**dict(get_preset("tiny").config, vocab_size=300, num_hidden_layers=2)))
    prefix = torch.randint(1, 300, (70,))
    ids = torch.zeros(3, 110, dtype=torch.long)
    mask = torch.zeros(3, 110, dtype=torch.long)
    for row, n in enumerate([110, 95, 102]):
        ids[row, :70] = prefix
        ids[row, 70:n] = torch.randint(1, 300, (n - 70,))
        mask[row, :n] = 1
    score = (torch.rand(3, 110) > 0.5).long()
    score[:, 60:75] = 1  # scored tokens inside and right after the shared prefix
    return model, ids, mask, score


def plain(model, ids, mask, score):
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
    logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]
    return torch.nn.functional.pad(logp * (score[:, 1:] * mask[:, 1:]), (1, 0))


def grads(model, value):
    model.zero_grad()
    value.sum().backward()
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("share_prefix", [True, False])
def test_token_logprobs_and_gradients_equal_the_plain_forward(batch, share_prefix):
    model, ids, mask, score = batch
    assert shared_prefix_length(ids, mask) == 70
    expected = plain(model, ids, mask, score)
    expected_grads = grads(model, expected)
    forward = PolicyForward(model, share_prefix=share_prefix, min_shared=16)
    got = forward.token_logprobs(ids, mask, score)
    torch.testing.assert_close(got.logprobs, expected, atol=2e-5, rtol=0)
    for g, e in zip(grads(model, got.logprobs), expected_grads):
        torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4)


def test_entropy_and_temperature(batch):
    model, ids, mask, score = batch
    out = PolicyForward(model).token_logprobs(ids, mask, score, temperature=0.5, with_entropy=True)
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1] / 0.5
    logp_all = torch.log_softmax(logits, -1)
    weight = (score[:, 1:] * mask[:, 1:]).float()
    expected_logp = torch.nn.functional.pad(logp_all.gather(-1, ids[:, 1:, None])[..., 0] * weight, (1, 0))
    expected_entropy = torch.nn.functional.pad(-(logp_all.exp() * logp_all).sum(-1) * weight, (1, 0))
    torch.testing.assert_close(out.logprobs, expected_logp, atol=2e-5, rtol=0)
    torch.testing.assert_close(out.entropy, expected_entropy, atol=2e-5, rtol=0)
    assert not out.entropy.requires_grad  # logged only, no autograd graph kept


def test_cpu_autocast_runs_the_pass_in_bfloat16_and_scores_in_float32(batch):
    """``policy.cpu_autocast``: the matmuls run in bfloat16 (the scores move off the float32 ones
    by bfloat16 rounding, not more), the scores come out float32 and float32 gradients flow."""
    model, ids, mask, score = batch
    exact = PolicyForward(model).token_logprobs(ids, mask, score).logprobs  # True: CUDA only, so float32 here
    torch.testing.assert_close(exact, plain(model, ids, mask, score), atol=2e-5, rtol=0)
    mixed = PolicyForward(model, autocast=("cpu",)).token_logprobs(ids, mask, score).logprobs
    assert mixed.dtype == torch.float32
    gap = (mixed - exact).abs().max().item()
    assert 1e-4 < gap < 0.1  # bfloat16 has 8 bits of mantissa: rounding shows, nothing else does
    gradients = grads(model, mixed)
    assert all(g.dtype == torch.float32 and torch.isfinite(g).all() for g in gradients)
    assert sum(g.abs().sum().item() for g in gradients) > 0


def test_where_autocast_applies():
    from agentgrpo.policy.device import autocast, autocast_enabled
    from agentgrpo.policy.settings import PolicySource

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert autocast_enabled(cuda, True) and not autocast_enabled(cpu, True)  # the default: CUDA only
    assert autocast_enabled(cpu, ("cuda", "cpu")) and not autocast_enabled(cuda, ("cpu",))
    assert not autocast_enabled(cpu, False) and not autocast_enabled(torch.device("mps"), ("mps",))
    assert PolicySource().autocast_devices == ("cuda",)
    assert PolicySource(cpu_autocast=True).autocast_devices == ("cuda", "cpu")
    assert PolicySource(autocast=False).autocast_devices == ()
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with autocast(cpu, ("cpu",)):
        assert (a @ b).dtype == torch.bfloat16
    with autocast(cpu, True):
        assert (a @ b).dtype == torch.float32


X86_CPUINFO = """processor\t: 0
vendor_id\t: {vendor}
flags\t\t: fpu sse2 avx2 {extra}
"""


def test_cpu_autocast_auto_follows_native_bfloat16():
    """``policy.cpu_autocast=auto``: on where /proc/cpuinfo names a bfloat16 unit (x86's AVX512-BF16
    or AMX, Arm's BF16), off where a bfloat16 pass would be emulated, or where nothing says."""
    from agentgrpo.policy.settings import PolicySource, cpu_computes_bfloat16

    assert cpu_computes_bfloat16(X86_CPUINFO.format(vendor="GenuineIntel", extra="avx512f amx_bf16 amx_tile"))
    assert cpu_computes_bfloat16(X86_CPUINFO.format(vendor="AuthenticAMD", extra="avx512f avx512_bf16"))
    assert cpu_computes_bfloat16("processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n")
    assert not cpu_computes_bfloat16(X86_CPUINFO.format(vendor="AuthenticAMD", extra="avx512f avx512bw"))
    assert not cpu_computes_bfloat16("model name\t: bf16 lookalike\n")  # only the feature lists count
    assert not cpu_computes_bfloat16("")
    native = cpu_computes_bfloat16()  # this machine's own answer decides auto
    assert PolicySource(cpu_autocast="auto").autocast_devices == (("cuda", "cpu") if native else ("cuda",))
    assert PolicySource(cpu_autocast="auto", autocast=False).autocast_devices == (("cpu",) if native else ())
