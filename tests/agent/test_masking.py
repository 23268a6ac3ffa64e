"""Render-Twice-Diff on our ChatML template and on other templates (SmolLM2's: tests/policy)."""
from __future__ import annotations

import copy

from agentgrpo.agent.chat import ChatFormat
from agentgrpo.agent.format import render_assistant
from agentgrpo.agent.masking import IGNORE_INDEX, SFTExample, build_sft_example, build_sft_examples

from .conftest import gold_transcript


def assert_labels_are_exactly_the_assistant_turns(chat_format: ChatFormat, messages, example: SFTExample):
    """Each labelled span decodes to one assistant message + end-of-turn, in order; nothing else."""
    chat = chat_format.chat_messages(messages)
    expected = [m["content"] + chat_format.end_of_turn for m in chat if m["role"] == "assistant"]
    spans = example.label_spans()
    assert [chat_format.decode(example.input_ids[s:e]) for s, e in spans] == expected
    for s, e in spans:
        assert example.labels[s:e] == example.input_ids[s:e]
    labelled = {t for s, e in spans for t in range(s, e)}
    assert all(label == IGNORE_INDEX for t, label in enumerate(example.labels) if t not in labelled)
    assert len(example.input_ids) == len(example.labels)


def test_hand_sized_example(chat_format):
    """user, assistant: the labels are the turn's tokens plus <|im_end|>; its newline is not."""
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello!"}]
    example = build_sft_example(chat_format, messages)
    prompt = chat_format.encode(
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    turn = chat_format.encode("Hello!")
    assert example.input_ids == prompt + turn + [chat_format.end_of_turn_id] + chat_format.encode("\n")
    assert example.labels == [IGNORE_INDEX] * len(prompt) + turn + [chat_format.end_of_turn_id, IGNORE_INDEX]
    assert example.num_label_tokens == len(turn) + 1


def test_tool_calls_and_messages_on_a_real_transcript(domain, chat_format):
    messages = gold_transcript(domain, 0)
    messages[0] = {"role": "system", "content": chat_format.system_prompt}
    example = build_sft_example(chat_format, messages)
    assert example is not None
    assert [a.name for a in domain.tasks[0].actions] == ["book_reservation"]
    assert len(example.label_spans()) == 3  # get_user_details, book_reservation, the closing message
    assert_labels_are_exactly_the_assistant_turns(chat_format, messages, example)
    labelled_text = "".join(chat_format.decode(example.input_ids[s:e]) for s, e in example.label_spans())
    assert "<tool_call>" in labelled_text and domain.tasks[0].user_id in labelled_text
    for message in messages:  # nothing of the system, user or tool messages is trained on
        if message["role"] != "assistant":
            assert message["content"][:40] not in labelled_text


def test_openai_and_chat_shapes_give_the_same_example(domain, chat_format):
    messages = gold_transcript(domain, 4)
    from_openai = build_sft_example(chat_format, chat_format.chat_messages(messages))
    assert build_sft_example(chat_format, messages) == from_openai


def test_max_length_truncates_from_the_end(chat_format):
    messages = [{"role": "user", "content": "Please cancel my trip."},
                {"role": "assistant", "content": render_assistant("Sure.", "cancel_reservation",
                                                                  {"reservation_id": "ZFA04Y"})}]
    full = build_sft_example(chat_format, messages)
    start, end = full.label_spans()[0]
    cut = build_sft_example(chat_format, messages, max_length=start + 3)
    assert cut.input_ids == full.input_ids[: start + 3] and cut.num_label_tokens == 3
    assert build_sft_example(chat_format, messages, max_length=start) is None  # no label survives
    assert build_sft_example(chat_format, messages, max_length=10_000) == full


def test_conversation_without_assistant_turn_is_rejected(chat_format):
    assert build_sft_example(chat_format, [{"role": "user", "content": "Hi"}]) is None


def _clone_with_template(tokenizer, template):
    clone = copy.deepcopy(tokenizer)
    clone.chat_template = template
    return clone


def test_another_template_is_masked_without_knowing_it(domain, domain_tokenizer):
    """Template-agnostic: turns closed by <|endoftext|>, no newline glue, role labels as text."""
    template = (
        "{%- for m in messages -%}{{- '### ' + m['role'] + ':\\n' + m['content'] + '<|endoftext|>' -}}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '### assistant:\\n' -}}{%- endif -%}"
    )
    other = ChatFormat(_clone_with_template(domain_tokenizer, template), domain.tool_schemas(), domain.policy)
    messages = gold_transcript(domain, 0)
    example = build_sft_example(other, messages)
    assert other.end_of_turn == "<|endoftext|>"
    assert_labels_are_exactly_the_assistant_turns(other, messages, example)


def test_inconsistent_template_is_detected_and_counted(domain, domain_tokenizer):
    """A template that rewrites earlier assistant turns breaks the prefix property."""
    template = (
        "{%- for m in messages -%}"
        "{%- set c = '(earlier turn)' if m['role'] == 'assistant' and not loop.last else m['content'] -%}"
        "{{- '<|im_start|>' + m['role'] + '\\n' + c + '<|im_end|>\\n' -}}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
    )
    rewriting = ChatFormat(_clone_with_template(domain_tokenizer, template), domain.tool_schemas(), domain.policy)
    one_turn = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
    two_turns = gold_transcript(domain, 0)
    assert build_sft_example(rewriting, one_turn) is not None  # the last turn renders consistently
    assert build_sft_example(rewriting, two_turns) is None
    examples, rejected = build_sft_examples(rewriting, [two_turns, one_turn, two_turns])
    assert (len(examples), rejected) == (1, 2)
