"""The domain BPE tokenizer: training, special tokens, chat template, save/load, corpus."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from agentgrpo.agent.chat import build_system_prompt
from agentgrpo.policy.tokenizer import domain_corpus, train_tokenizer


@pytest.fixture(scope="module")
def tokenizer(corpus):
    return train_tokenizer(corpus, vocab_size=4096)


def test_vocabulary_size_and_special_tokens(tokenizer):
    assert len(tokenizer) == 4096
    assert tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == [0, 1, 2]
    special = (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token)
    assert special == ("<|endoftext|>", "<|im_end|>", "<|endoftext|>")
    # the two tool-call tags are the last two ids, single tokens, and not special
    assert tokenizer.convert_tokens_to_ids(["<tool_call>", "</tool_call>"]) == [4094, 4095]
    assert "<tool_call>" not in tokenizer.all_special_tokens
    ids = tokenizer.encode("<tool_call>\n{}\n</tool_call><|im_end|>", add_special_tokens=False)
    assert ids[0] == 4094 and ids[-2:] == [4095, 2]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "<tool_call>\n{}\n</tool_call>"


def test_training_is_deterministic(corpus, tokenizer):
    again = train_tokenizer(corpus, vocab_size=4096)
    assert again.backend_tokenizer.to_str() == tokenizer.backend_tokenizer.to_str()


def test_no_merges_are_learned_across_the_marker_tokens(tokenizer):
    markers = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>")
    vocab = tokenizer.get_vocab()
    partial = [t for t in vocab if t not in markers and any(m in t for m in ("im_start", "im_end", "tool_call>"))]
    assert partial == []


def test_domain_text_is_compressed(tokenizer, domain):
    """A trained vocabulary packs domain JSON far tighter than bytes (a few chars per token)."""
    record = domain.execute(domain.new_state(), "get_user_details", {"user_id": domain.tasks[0].user_id})
    assert len(record) / len(tokenizer.encode(record, add_special_tokens=False)) > 2.5


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=200))
def test_byte_level_round_trip(tokenizer, text):
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_save_and_load_with_auto_tokenizer(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert len(loaded) == 4096 and loaded.eos_token == "<|im_end|>" and loaded.pad_token_id == 0
    text = '<|im_start|>user\nHi<|im_end|>\n<tool_call>\n{"name": "think"}\n</tool_call>'
    assert loaded.encode(text, add_special_tokens=False) == tokenizer.encode(text, add_special_tokens=False)
    messages = [
        {"role": "system", "content": "Policy."},
        {"role": "user", "content": "Cancel ZFA04Y."},
        {"role": "assistant", "content": "Checking.", "tool_calls": [{"id": "c0", "type": "function", "function": {
            "name": "get_reservation_details", "arguments": {"reservation_id": "ZFA04Y"}}}]},
        {"role": "tool", "content": "{}"},
        {"role": "assistant", "content": "It is cancelled."},
    ]
    assert loaded.apply_chat_template(messages, tokenize=False, add_generation_prompt=False) == (
        "<|im_start|>system\nPolicy.<|im_end|>\n"
        "<|im_start|>user\nCancel ZFA04Y.<|im_end|>\n"
        '<|im_start|>assistant\nChecking.\n<tool_call>\n{"name": "get_reservation_details", '
        '"arguments": {"reservation_id": "ZFA04Y"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>tool\n{}<|im_end|>\n"
        "<|im_start|>assistant\nIt is cancelled.<|im_end|>\n"
    )


def test_vocabulary_too_small_is_refused():
    with pytest.raises(ValueError, match="at least"):
        train_tokenizer(["abc"], vocab_size=100)


def test_small_corpus_gives_a_smaller_vocabulary():
    tokenizer = train_tokenizer(["the cat sat on the mat"] * 3, vocab_size=4096)
    assert 261 < len(tokenizer) < 300  # 256 bytes + 3 specials + 2 tags + the few merges there are


def test_domain_corpus_contents(domain):
    state = domain.new_state()
    users = sorted(state.materialize()["users"])
    assert len(users) == 150
    texts = domain_corpus(domain, extra_texts=["<|im_start|>user\nhello<|im_end|>"], max_records=15)
    assert texts[0] == domain.policy
    assert build_system_prompt(domain.policy, domain.tool_schemas()) in texts
    assert json.dumps(domain.tool_schemas()[0], ensure_ascii=False) in texts
    # every 10th of the 150 users, printed by the tool itself
    assert domain.execute(state, "get_user_details", {"user_id": users[10]}) in texts
    assert domain.execute(state, "get_user_details", {"user_id": users[11]}) not in texts
    printed = {domain.execute(state, "get_user_details", {"user_id": users[10 * i]}) for i in range(15)}
    assert printed <= set(texts)
    assert any(t.startswith("[{") and '"flight_number"' in t for t in texts)  # direct-flight searches
    assert domain.tasks[7].instruction in texts
    assert texts[-1] == "<|im_start|>user\nhello<|im_end|>"


def test_atomic_texts_are_one_token_each_and_survive_saving(tmp_path):
    call = '<tool_call>\n{"name": "submit", "arguments": {"key": "amber"}}\n</tool_call>'
    texts = ["My key is amber.", "Your key is submitted."] * 4
    tokenizer = train_tokenizer(texts, vocab_size=300, min_frequency=1, atomic_texts=[call])
    turn = f"<|im_start|>assistant\n{call}<|im_end|>"
    ids = tokenizer.encode(turn, add_special_tokens=False)
    assert tokenizer.convert_ids_to_tokens(ids[-2]) == call  # the longest match wins over <tool_call>
    assert tokenizer.decode(ids[-2:-1]) == call
    assert tokenizer.encode("<tool_call>\nx</tool_call>", add_special_tokens=False)[0] != ids[-2]
    tokenizer.save_pretrained(tmp_path)
    assert AutoTokenizer.from_pretrained(tmp_path).encode(turn, add_special_tokens=False) == ids
