"""The domain BPE tokenizer: training, special tokens, chat template, save/load, corpus."""
from __future__ import annotations

import json
import math
import re
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from agentgrpo.agent.chat import build_system_prompt
from agentgrpo.envs.config import EnvConfig, WorldConfig
from agentgrpo.envs.registry import build_heldout, build_training_worlds
from agentgrpo.policy.tokenizer import domain_corpus, train_tokenizer, world_identifiers

VOCAB = 4096


@pytest.fixture(scope="module")
def tokenizer(corpus):
    return train_tokenizer(corpus, vocab_size=VOCAB)


def test_vocabulary_size_and_special_tokens(tokenizer):
    assert len(tokenizer) == VOCAB
    assert tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == [0, 1, 2]
    special = (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token)
    assert special == ("<|endoftext|>", "<|im_end|>", "<|endoftext|>")
    # the two tool-call tags are the last two ids, single tokens, and not special
    assert tokenizer.convert_tokens_to_ids(["<tool_call>", "</tool_call>"]) == [VOCAB - 2, VOCAB - 1]
    assert "<tool_call>" not in tokenizer.all_special_tokens
    ids = tokenizer.encode("<tool_call>\n{}\n</tool_call><|im_end|>", add_special_tokens=False)
    assert ids[0] == VOCAB - 2 and ids[-2:] == [VOCAB - 1, 2]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "<tool_call>\n{}\n</tool_call>"


def test_training_is_deterministic(corpus, tokenizer):
    again = train_tokenizer(corpus, vocab_size=VOCAB)
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
    assert len(loaded) == VOCAB and loaded.eos_token == "<|im_end|>" and loaded.pad_token_id == 0
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
    with pytest.raises(ValueError, match="split must be one of"):
        train_tokenizer(["abc"], vocab_size=400, split="chars")


def test_small_corpus_gives_a_smaller_vocabulary():
    tokenizer = train_tokenizer(["the cat sat on the mat"] * 3, vocab_size=4096)
    assert 261 < len(tokenizer) < 300  # 256 bytes + 3 specials + 2 tags + the few merges there are


def test_domain_corpus_contents(domain):
    state = domain.new_state()
    data = state.materialize()
    users = sorted(data["users"])
    assert len(users) == 150
    raw = domain_corpus(domain, max_records=15)
    assert domain.execute(state, "get_user_details", {"user_id": users[10]}) in raw  # the word split's corpus
    texts = domain_corpus(domain, extra_texts=["<|im_start|>user\nhello<|im_end|>"], max_records=15,
                          strip_identifiers=True)
    assert texts[0] == domain.policy
    assert build_system_prompt(domain.policy, domain.tool_schemas()) in texts

    def printed(user_id):  # the record as the tool prints it, the world's ids taken out
        record = domain.execute(state, "get_user_details", {"user_id": user_id})
        for identifier in sorted(world_identifiers(data), key=len, reverse=True):
            record = record.replace(f'"{identifier}"', '""')
        return record

    assert json.dumps(domain.tool_schemas()[0], ensure_ascii=False) in texts
    # every 10th of the 150 users, printed by the tool itself
    assert printed(users[10]) in texts and printed(users[11]) not in texts
    assert {printed(users[10 * i]) for i in range(15)} <= set(texts)
    assert any(t.startswith("[{") and '"flight_number"' in t for t in texts)  # direct-flight searches
    assert texts[-1] == "<|im_start|>user\nhello<|im_end|>"
    # no user, reservation or payment id nor e-mail address survives, in any text
    corpus = "\n".join(texts)
    assert not [i for i in world_identifiers(data) if re.search(rf"(?<![\w.@-]){re.escape(i)}(?![\w.@-])", corpus)]
    assert printed(users[10]) != domain.execute(state, "get_user_details", {"user_id": users[10]})  # ...which it prints


ID_KINDS = ("user", "reservation", "payment", "email")


def _ids_by_kind(domain) -> dict[str, list[str]]:
    data = domain.new_state().materialize()
    return {"user": sorted(data["users"]), "reservation": sorted(data["reservations"]),
            "payment": sorted(p for u in data["users"].values() for p in u["payment_methods"]),
            "email": sorted(u["email"] for u in data["users"].values())}


def test_ids_tokenize_alike_in_training_and_held_out_worlds():
    """A policy trained in some worlds must copy the ids of others: every id kind has the same
    distribution of tokens per id in the training worlds as in held-out worlds, and no id of a
    training world is one token (its merges would be memorised, not read)."""
    config = EnvConfig(train_worlds=4, world=WorldConfig(n_users=60, n_reservations=120))
    worlds = build_training_worlds(config)
    tokenizer = train_tokenizer(domain_corpus([w.domain for w in worlds], strip_identifiers=True), vocab_size=4096,
                                split="id")
    heldout = build_heldout(config, ["covered_seen"], 40, training=worlds[0])
    assert {b.world_seed for b in heldout}.isdisjoint({w.world_seed for w in worlds})

    def lengths(domains, kind):  # tokens per id as it appears in a JSON string (after a quote)
        return [len(tokenizer.encode('"' + i, add_special_tokens=False)) - 1
                for d in domains for i in _ids_by_kind(d)[kind]]

    for kind in ID_KINDS:
        train = lengths([w.domain for w in worlds], kind)
        held = lengths([b.domain for b in heldout], kind)
        assert min(train) > 1, kind
        mean_train, mean_held = statistics.mean(train), statistics.mean(held)
        noise = 3 * math.sqrt(statistics.pvariance(train) / len(train) + statistics.pvariance(held) / len(held))
        assert abs(mean_train - mean_held) <= max(noise, 0.05), (kind, mean_train, mean_held)
    # the shapes that make this so: a digit and a capital are a token each, lower-case words stay whole
    pieces = tokenizer.convert_ids_to_tokens(tokenizer.encode('"0KEWFW', add_special_tokens=False))
    assert pieces == ['"', "0", "K", "E", "W", "F", "W"]
    assert len(tokenizer.encode("get_user_details", add_special_tokens=False)) == 1
    # and the ids a call copies alike in every context: after a space (the user's words) as after a
    # quote (a call's JSON)
    space = tokenizer.encode(" ", add_special_tokens=False)
    for domain in [worlds[1].domain, heldout[0].domain]:
        for kind in ("user", "reservation", "payment"):
            for identifier in _ids_by_kind(domain)[kind][:20]:
                quoted = tokenizer.encode('"' + identifier, add_special_tokens=False)[1:]
                assert tokenizer.encode(" " + identifier, add_special_tokens=False) == space + quoted, identifier


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
