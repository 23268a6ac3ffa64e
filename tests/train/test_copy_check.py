"""The copy check: which ids a demonstration copies, where they sit, and the accuracy on them."""
from __future__ import annotations

import math

import pytest
import torch

from agentgrpo.agent.masking import IGNORE_INDEX, SFTExample
from agentgrpo.train.copy_check import (
    CopyProbe,
    SlotRecallTokens,
    copied_values,
    copy_accuracy,
    copy_warmup_batch,
    copy_warmup_loss,
    find_copy_spans,
    labelled_nll,
    slot_recall_batch,
    slot_recall_tokens,
)


def _call(name, **arguments):
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": name, "arguments": arguments}}]}


def test_copied_values_are_digit_bearing_arguments_seen_earlier():
    messages = [
        {"role": "system", "content": "policy with example id ZZZ999"},
        {"role": "user", "content": "I am mia_li_3668, cancel 0KEWFW please"},
        _call("get_user_details", user_id="mia_li_3668"),
        {"role": "tool", "content": '{"payment_methods": {"gift_card_1234567": {}}}'},
        _call("cancel_reservation", reservation_id="0KEWFW", reason="change_of_plan"),
        _call("book", payment_id="gift_card_1234567", origin="JFK", guess="ABC123",
              passengers=[{"dob": "1990-01-01"}]),
        {"role": "user", "content": "born 1990-01-01"},
        _call("get_reservation_details", reservation_id="ZZZ999"),  # only in the system prompt
    ]
    # reason/origin: no digit; ABC123: never seen; the dob appears only after the call; ZZZ999: system text
    assert copied_values(messages) == ["mia_li_3668", "0KEWFW", "gift_card_1234567"]
    as_json = [{**m, "tool_calls": [{"function": {"name": "f", "arguments": '{"user_id": "mia_li_3668"}'}}]}
               if m.get("tool_calls") else m for m in messages[:3]]
    assert copied_values(as_json) == ["mia_li_3668"]


def test_spans_are_found_in_labelled_tokens_only_and_in_order():
    #            0  1  2  3  4  5  6  7  8  9
    input_ids = [5, 7, 8, 1, 7, 8, 2, 7, 8, 9]
    labels = [IGNORE_INDEX] * 3 + input_ids[3:]  # the first "7 8" is in the prompt: not a copy
    example = SFTExample(input_ids, labels)
    assert find_copy_spans(example, [[7, 8], [7, 8, 9], [4, 4]]) == [(4, 6), (7, 10)]
    assert find_copy_spans(example, [[7, 8], [7, 8]]) == [(4, 6), (7, 9)]


class _NextIsPlusOne(torch.nn.Module):
    """Predicts token t+1 = token t + 1: a model whose argmax is known by hand."""

    def __init__(self, vocab: int = 16):
        super().__init__()
        self.vocab = vocab
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids):
        logits = torch.nn.functional.one_hot((input_ids + 1) % self.vocab, self.vocab).float()
        return type("Out", (), {"logits": logits})()


def test_copy_accuracy_by_hand():
    model = _NextIsPlusOne()
    # span (2, 5) = tokens 3 4 5 after 2: all predicted; span (6, 8) = 9 1 after 7: 9 wrong (8 expected), 1 wrong
    probes = [CopyProbe([1, 2, 3, 4, 5, 0, 9, 1, 0], [(2, 5), (6, 8)]), CopyProbe([1, 2], [])]
    score = copy_accuracy(model, probes)
    assert score.tokens == 5 and score.ids == 2
    assert score.token_accuracy == pytest.approx(3 / 5) and score.id_accuracy == pytest.approx(1 / 2)
    # first tokens: 3 right, 9 wrong; after them: 4 and 5 right, 1 wrong
    assert score.first_accuracy == pytest.approx(1 / 2) and score.continue_accuracy == pytest.approx(2 / 3)
    assert score.as_metrics() == {"sft/copy_token_acc": 0.6, "sft/copy_id_acc": 0.5, "sft/copy_first_acc": 0.5,
                                  "sft/copy_continue_acc": pytest.approx(2 / 3), "sft/copy_ids": 2.0}


def test_copy_warmup_batches_repeat_a_random_segment_of_pool_tokens():
    generator = torch.Generator().manual_seed(0)
    batch = copy_warmup_batch([3, 5, 9], length=6, batch_size=4, generator=generator, bos_token_id=0)
    assert batch.shape == (4, 13) and (batch[:, 0] == 0).all()
    assert torch.equal(batch[:, 1:7], batch[:, 7:]) and set(batch[:, 1:].unique().tolist()) <= {3, 5, 9}
    again = copy_warmup_batch([3, 5, 9], 6, 4, torch.Generator().manual_seed(0), 0)
    assert torch.equal(batch, again)  # seeded


def test_copy_warmup_segments_hide_at_random_distances_in_context():
    pool = list(range(10, 50))
    batch = copy_warmup_batch(pool, length=5, batch_size=64, generator=torch.Generator().manual_seed(1),
                              bos_token_id=0, context=40)
    assert batch.shape == (64, 1 + 40 + 5) and set(batch[:, 1:].unique().tolist()) <= set(pool)
    starts = set()
    for row in batch.tolist():
        segment, context = row[-5:], row[1:41]
        found = [i for i in range(36) if context[i:i + 5] == segment]
        assert found  # the final segment occurs in the context
        starts.add(found[0])
    assert len(starts) > 20  # at many distances: no fixed offset predicts it
    with pytest.raises(ValueError, match="context"):
        copy_warmup_batch(pool, 8, 2, torch.Generator(), 0, context=4)


def test_copy_warmup_loss_is_the_nll_of_the_repeat_after_its_first_token_by_hand():
    model = _NextIsPlusOne(vocab=16)
    # [bos, 1, 2, 3, 1, 2, 4] with length 3: targets 2 and 4 are predicted from tokens 1 and 2,
    # whose "+1" predictions 2 and 3 are right for 2, wrong for 4; the repeat's first token is not scored
    sequences = torch.tensor([[0, 1, 2, 3, 1, 2, 4]])
    logsumexp = math.log(15 + math.e)  # one-hot logits: one 1 and fifteen 0s
    expected = ((logsumexp - 1) + (logsumexp - 0)) / 2
    assert copy_warmup_loss(model, sequences, length=3).item() == pytest.approx(expected, rel=1e-6)


def test_renumbered_probes_hold_the_same_copies_under_other_slot_numbers(tiny_policy_dir):
    """``copy_probes(renumber=...)``: the same demonstrations and copied values with every
    slot renumbered, so the usual slot (``<U1>``) is no longer the answer; refused without a
    delexicalised view."""
    import random

    from helpers import SMALL_ENV_OVERRIDES

    from agentgrpo.agent.chat import ChatFormat
    from agentgrpo.config import ConfigError, load_config
    from agentgrpo.envs.registry import build_env
    from agentgrpo.policy.hf import load_policy
    from agentgrpo.train.demonstrations import copy_probes
    from agentgrpo.train.sft_config import SFTConfig

    config = load_config(SFTConfig, [*SMALL_ENV_OVERRIDES, "data.copy_check_tasks=3", "env.delexicalise=true",
                                     "run_dir=unused"], defaults="sft.yaml")
    bundle = build_env(config.env)
    _, tokenizer = load_policy(tiny_policy_dir)
    chat = ChatFormat(tokenizer, bundle.domain.tool_schemas(), bundle.domain.policy, prompt_style="compact")
    plain, skipped = copy_probes(config, bundle, chat)
    renumbered, _ = copy_probes(config, bundle, chat, random.Random(0))
    assert skipped is None and len(plain) == len(renumbered) == 3
    assert [len(p.spans) for p in plain] == [len(p.spans) for p in renumbered] and plain[0].spans
    assert all(a.input_ids != b.input_ids for a, b in zip(plain, renumbered))
    u1 = chat.encode("<U1>")
    user_copies = [p.input_ids[s:e] for p in plain for s, e in p.spans if p.input_ids[s:e] == u1]
    assert user_copies and not all(p.input_ids[s:e] == u1 for p in renumbered for s, e in p.spans)

    from agentgrpo.train.sft import _probe_renumbering
    assert isinstance(_probe_renumbering(config), random.Random)  # SFT's own check renumbers the slots

    config.env.delexicalise = False
    assert _probe_renumbering(config) is None
    with pytest.raises(ConfigError, match="delexicalised"):
        copy_probes(config, bundle, chat, random.Random(0))


def test_labelled_nll_is_the_mean_nll_of_the_marked_tokens_by_hand():
    model = _NextIsPlusOne(vocab=16)
    sequences = torch.tensor([[0, 1, 2, 7], [3, 4, 9, 9]])
    labelled = torch.tensor([[False, False, True, True], [False, True, False, False]])
    # row 0: 2 after 1 (right: +1), 7 after 2 (wrong); row 1: 4 after 3 (right)
    logsumexp = math.log(15 + math.e)
    expected = ((logsumexp - 1) + (logsumexp - 0) + (logsumexp - 1)) / 3
    assert labelled_nll(model, sequences, labelled).item() == pytest.approx(expected, rel=1e-6)


SLOTS = [[100, 101, 102], [200, 201], [300]]  # three kinds: three, two and one slot
QUERIES = [[[7, 8]], [[9]], []]  # the third kind is never asked for (no call copies it)


def _kind(token):
    return next((k for k, slots in enumerate(SLOTS) if token in slots), None)


def test_slot_recall_rows_ask_for_a_kind_and_label_its_latest_mention():
    tokens = SlotRecallTokens(filler=[1, 2, 3, 4, 5], slots=SLOTS, queries=QUERIES)
    sequences, labelled = slot_recall_batch(tokens, context=48, queries=5, batch_size=64,
                                            generator=torch.Generator().manual_seed(0), bos_token_id=0)
    assert sequences.shape == labelled.shape and sequences[:, 0].eq(0).all()
    answers, asked_kinds = [], set()
    for row, marks in zip(sequences.tolist(), labelled.tolist()):
        latest = {}
        assert 1 <= sum(marks) <= 5  # a query can only come after a mention
        for t, token in enumerate(row):
            if marks[t]:
                kind = _kind(token)
                assert kind is not None and token == latest[kind]  # the kind's latest mention
                query = [7, 8] if kind == 0 else [9]
                assert row[t - len(query):t] == query  # right after a query context of that kind
                asked_kinds.add(kind)
                answers.append(token)
            elif _kind(token) is not None:
                latest[_kind(token)] = token
    assert asked_kinds == {0, 1}
    assert set(answers) == {100, 101, 102, 200, 201}  # every slot number is asked for: no usual slot
    again, _ = slot_recall_batch(tokens, 48, 5, 64, torch.Generator().manual_seed(0), 0)
    assert torch.equal(sequences, again)


def test_slot_recall_tokens_come_from_the_demonstrations_labelled_text_before_a_slot():
    ignore = IGNORE_INDEX
    # a user turn names slot 101 (unlabelled); the assistant writes 6 7 8 9 then copies 101, then 3
    example = SFTExample(input_ids=[5, 101, 6, 7, 8, 9, 101, 3],
                         labels=[ignore, ignore, 6, 7, 8, 9, 101, 3])
    found = slot_recall_tokens([example], [[100, 101], [200]], query_tokens=6)
    assert found.queries == [[[6, 7, 8, 9]], []]  # back to the start of the assistant's text
    assert found.filler == [3, 5, 6, 7, 8, 9]  # every token but the slots
    assert slot_recall_tokens([example], [[100, 101], [200]], query_tokens=3).queries[0] == [[7, 8, 9]]
    with pytest.raises(ValueError, match="query context"):
        slot_recall_tokens([example], [[200]])  # no demonstration copies this kind
