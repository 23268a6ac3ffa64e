"""The tool-call grammar: every turn we train on is a sentence of it, the writes the SFT got
wrong are not, and the masks replay exactly what a sampler saw."""
from __future__ import annotations

import json

import numpy as np
import pytest

from agentgrpo.agent.chat import ChatFormat
from agentgrpo.agent.format import render_assistant, render_tool_call
from agentgrpo.agent.grammar import (
    context_values,
    strict_schema,
    turn_grammar,
    values_by_kind,
    without_turns,
    word_kind,
)
from agentgrpo.envs.airline.spec import AIRLINE_ID_KINDS
from agentgrpo.envs.delex import slot_tokens
from agentgrpo.envs.registry import id_kinds
from agentgrpo.policy.tokenizer import domain_corpus, train_tokenizer
from agentgrpo.train.demonstrations import collect_demonstrations


def _turn(chat: ChatFormat, text: str) -> list[int]:
    return chat.encode(text) + [chat.eos_token_ids[0]]


@pytest.fixture(scope="module")
def grammar(chat_format):
    return chat_format.grammar(len(chat_format.tokenizer))


def test_strict_schema_closes_objects_and_drops_descriptions():
    schema = {"type": "object", "description": "d", "properties": {
        "items": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "string"}}}}}}
    assert strict_schema(schema) == {"type": "object", "additionalProperties": False, "properties": {
        "items": {"type": "array", "items": {"type": "object", "additionalProperties": False,
                                             "properties": {"x": {"type": "string"}}}}}}


def test_the_grammar_names_every_tool_once(domain):
    lark = turn_grammar(domain.tool_schemas(), (7, 8))
    for tool in domain.tool_schemas():
        assert lark.count(json.dumps('{"name": ' + json.dumps(tool["function"]["name"]))[:-1]) == 1
    assert "<[7]>" in lark and "<[8]>" in lark


def test_calls_that_match_their_schema_are_sentences(chat_format, grammar):
    call = render_assistant("The user confirmed, so I update the flights.", "update_reservation_flights", {
        "reservation_id": "ZFA04Y", "cabin": "economy",
        "flights": [{"flight_number": "HAT001", "date": "2024-05-01"}], "payment_id": "credit_card_7815826"})
    assert grammar.accepts(_turn(chat_format, call))
    assert grammar.accepts(_turn(chat_format, "Could you give me your user id?"))
    assert grammar.accepts(_turn(chat_format, render_tool_call("list_all_airports", {})))


@pytest.mark.parametrize("name, arguments", [
    # the SFT's failures, as its evaluation recorded them
    ("update_reservation_flights", {"reservation_id": "ZFA04Y"}),                       # required args missing
    ("update_reservation_baggages", {"reservation_id": "ZFA04Y"}),
    ("book_reservation", {"reservation_id": "", "user_id": "mia_li_3668"}),           # an argument it does not take
    ("update_reservation_flights", {"reservation_id": "ZFA04Y", "cabin": "first",     # a cabin that does not exist
                                    "flights": [], "payment_id": "credit_card_7815826"}),
    ("update_reservation_baggages", {"reservation_id": "ZFA04Y", "total_baggages": "two",  # words for numbers
                                     "nonfree_baggages": 0, "payment_id": "credit_card_7815826"}),
    ("cancel_everything", {"reservation_id": "ZFA04Y"}),                               # an unknown tool
])
def test_calls_that_break_their_schema_are_not(chat_format, grammar, name, arguments):
    assert not grammar.accepts(_turn(chat_format, render_tool_call(name, arguments)))


def test_nothing_may_follow_a_call_and_a_turn_is_not_empty(chat_format, grammar):
    call = render_tool_call("get_user_details", {"user_id": "mia_li_3668"})
    assert not grammar.accepts(_turn(chat_format, call + " Thanks!"))
    assert not grammar.accepts([chat_format.eos_token_ids[0]])
    assert not grammar.accepts(chat_format.encode(call))  # complete, but the end-of-turn is missing


def test_every_demonstration_turn_is_a_sentence(domain):
    """All assistant turns of the oracle's demonstrations, ids as the delexicalised policy
    sees them (slot tokens are one token each, inside JSON strings)."""
    from agentgrpo.envs.airline.factory import EnvConfig, SplitConfig, build_env

    config = EnvConfig(n_tasks=48, splits=SplitConfig(covered_seen=24, uncovered_seen=24, unseen=0), delexicalise=True)

    bundle = build_env(config)
    tokenizer = train_tokenizer(domain_corpus(bundle.domain), vocab_size=4096,
                                atomic_texts=slot_tokens(id_kinds(config)))
    chat = ChatFormat(tokenizer, bundle.domain.tool_schemas(), bundle.domain.policy)
    grammar = chat.grammar(len(tokenizer))
    demos = collect_demonstrations(bundle, config, ["covered_seen", "uncovered_seen", "unseen"], per_task=1, seed=0)
    turns = [m["content"] for demo in demos for m in chat.chat_messages(demo.messages) if m["role"] == "assistant"]
    calls = [t for t in turns if "<tool_call>" in t]
    written = {json.loads(t.split("<tool_call>")[1].split("</tool_call>")[0])["name"] for t in calls}
    assert {"book_reservation", "update_reservation_flights", "update_reservation_baggages",
            "update_reservation_passengers", "cancel_reservation"} <= written
    assert any("<R" in t or "<U" in t for t in calls)  # slots inside the JSON
    rejected = [t for t in turns if not grammar.accepts(_turn(chat, t))]
    assert rejected == []


def test_tau_bench_gold_actions_are_sentences(tau_bench_dir):
    """τ-bench airline's 50 test tasks: every gold action, rendered as our agent writes calls."""
    from agentgrpo.envs.airline.core.tau_bench import load_tau_bench

    domain = load_tau_bench(tau_bench_dir)
    tokenizer = train_tokenizer(domain_corpus(domain), vocab_size=4096)
    chat = ChatFormat(tokenizer, domain.tool_schemas(), domain.policy)
    grammar = chat.grammar(len(tokenizer))
    actions = [action for task in domain.tasks for action in task.actions]
    assert len(actions) > 100
    assert [a.name for a in actions if not grammar.accepts(_turn(chat, render_tool_call(a.name, a.kwargs)))] == []


def test_turn_masks_allow_each_token_taken_and_force_the_schema(chat_format, grammar):
    tokens = _turn(chat_format, render_tool_call("cancel_reservation", {"reservation_id": "ZFA04Y"}))
    masks = grammar.turn_masks(tokens)
    assert masks.shape == (len(tokens), grammar.words)
    bits = np.unpackbits(masks.view(np.uint8), bitorder="little").reshape(len(tokens), -1)
    assert all(bits[k, token] for k, token in enumerate(tokens))
    # after the tag, the call must name a tool: free text words are not allowed there
    word = chat_format.encode(" hello")[0]
    assert bits[0, word] and not bits[1, word]
    eos = chat_format.eos_token_ids[0]
    assert bits[-1, eos] and bits[-1].sum() <= len(chat_format.eos_token_ids)  # after </tool_call>: only the end


def test_spelled_out_tags_when_the_tokenizer_has_no_tag_tokens(domain):
    """A tokenizer without single ``<tool_call>`` tokens gets the tags spelled out."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator([domain_corpus(domain)[:20000]], trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>")
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}<|endoftext|>{% endfor %}"
    chat = ChatFormat(tokenizer, domain.tool_schemas(), domain.policy)
    grammar = chat.grammar(len(tokenizer))
    assert grammar.tag_tokens is None
    call = render_tool_call("get_user_details", {"user_id": "mia_li_3668"})
    assert grammar.accepts(_turn(chat, "I look the user up.\n" + call))
    assert not grammar.accepts(_turn(chat, render_tool_call("get_user_details", {})))


def test_context_values_are_the_words_of_the_conversation():
    values = context_values('Hi, my id is <U1>. Fly ORD to DTW on 2024-05-24. {"origin": "EWR"}')
    assert {"<U1>", "ORD", "DTW", "2024-05-24", "EWR", "origin"} <= set(values)
    assert "2024-05-24." not in values and '"EWR"' not in values and values == sorted(set(values))


def test_copied_arguments_must_come_from_the_context_free_text_need_not(chat_format):
    grammar = chat_format.grammar(len(chat_format.tokenizer), copy_values=True)
    context = chat_format.encode_prompt([{"role": "system", "content": chat_format.system_prompt},
                                         {"role": "user", "content": "My id is mia_li_3668. I fly ORD to DTW."}])
    search = render_tool_call("search_direct_flight", {"origin": "ORD", "destination": "DTW", "date": "2024-05-24"})
    assert not grammar.accepts(_turn(chat_format, search), context)  # the date was never said
    context += chat_format.encode("on 2024-05-24")
    assert grammar.accepts(_turn(chat_format, search), context)
    invented = render_tool_call("search_direct_flight", {"origin": "QQZ", "destination": "DTW", "date": "2024-05-24"})
    assert not grammar.accepts(_turn(chat_format, invented), context)
    transfer = render_tool_call("transfer_to_human_agents", {"summary": "Wants a refund nobody may give."})
    assert grammar.accepts(_turn(chat_format, transfer), context)
    # without the copy constraint, any string of the right type
    assert chat_format.grammar(len(chat_format.tokenizer)).accepts(_turn(chat_format, invented))


def test_the_system_prompt_is_not_a_source_of_values(chat_format):
    # ids may be a record's keys (a profile's payment methods), so JSON keys stay values
    assert "<P1>" in context_values('{"payment_methods": {"<P1>": {"source": "gift_card"}}}')
    grammar = chat_format.grammar(len(chat_format.tokenizer), copy_values=True)
    system = chat_format.render([{"role": "system", "content": chat_format.system_prompt}], False)
    assert grammar.context_start == len(chat_format.encode(system)) > 100
    context = chat_format.encode_prompt([{"role": "system", "content": chat_format.system_prompt},
                                         {"role": "user", "content": "I am <U1>."}])
    # "user_id" is in the system prompt's tool schemas, not in the conversation
    assert grammar.accepts(_turn(chat_format, render_tool_call("get_user_details", {"user_id": "<U1>"})), context)
    assert not grammar.accepts(_turn(chat_format, render_tool_call("get_user_details", {"user_id": "user_id"})),
                               context)


def test_words_have_the_kind_of_id_their_slot_or_pattern_says():
    kinds = list(AIRLINE_ID_KINDS)
    assert [word_kind(w, kinds) for w in ["<R2>", "<U1>", "ZFA04Y", "HAT001", "mia_li_3668",
                                          "credit_card_7815826", "JFK", "2024-05-01", "<X1>", "Noah"]] == \
        ["R", "U", "R", "F", "U", "P", None, None, None, None]
    choose = values_by_kind(["<R1>", "<U1>", "JFK", "HAT001", "2024-05-01", "<P1>"], kinds)
    assert choose("reservation_id") == ["<R1>"] and choose("user_id") == ["<U1>"]
    assert choose("flight_number") == ["HAT001"] and choose("payment_id") == ["<P1>"]
    assert choose("origin") == ["JFK", "2024-05-01"] == choose("dob")  # words of no kind


@pytest.mark.parametrize("delexicalised", [True, False], ids=["slots", "ids"])
def test_copy_by_kind_gives_each_id_argument_only_ids_of_its_kind(chat_format, delexicalised):
    grammar = chat_format.grammar(len(chat_format.tokenizer), copy_values=True, value_kinds=AIRLINE_ID_KINDS)
    by_word = chat_format.grammar(len(chat_format.tokenizer), copy_values=True)
    user, reservation, card = (("<U1>", "<R1>", "<P1>") if delexicalised
                               else ("mia_li_3668", "ZFA04Y", "credit_card_7815826"))
    said = f"I am {user}, cancel {reservation} and pay with {card}. I fly ORD to DTW on 2024-05-24."
    context = chat_format.encode_prompt([{"role": "system", "content": chat_format.system_prompt},
                                         {"role": "user", "content": said}])

    def allowed(name, arguments, g=grammar):
        return g.accepts(_turn(chat_format, render_tool_call(name, arguments)), context)

    assert allowed("cancel_reservation", {"reservation_id": reservation})
    for wrong in (user, card, "ORD", "2024-05-24"):  # words of the conversation, of the wrong kind
        assert not allowed("cancel_reservation", {"reservation_id": wrong})
        assert allowed("cancel_reservation", {"reservation_id": wrong}, by_word)  # copy alone lets them through
    assert allowed("get_user_details", {"user_id": user})
    assert not allowed("get_user_details", {"user_id": reservation})
    assert allowed("search_direct_flight", {"origin": "ORD", "destination": "DTW", "date": "2024-05-24"})
    assert not allowed("search_direct_flight", {"origin": reservation, "destination": "DTW", "date": "2024-05-24"})
    bags = {"reservation_id": reservation, "total_baggages": 1, "nonfree_baggages": 0, "payment_id": card}
    assert allowed("update_reservation_baggages", bags)
    assert not allowed("update_reservation_baggages", {**bags, "payment_id": user})


def test_a_tool_whose_id_no_one_has_said_cannot_be_called(chat_format):
    grammar = chat_format.grammar(len(chat_format.tokenizer), copy_values=True, value_kinds=AIRLINE_ID_KINDS)
    context = chat_format.encode_prompt([{"role": "system", "content": chat_format.system_prompt},
                                         {"role": "user", "content": "Hi, I want to cancel a trip. I fly from ORD."}])
    assert not grammar.accepts(_turn(chat_format, render_tool_call("cancel_reservation", {"reservation_id": "ORD"})),
                               context)
    # what needs no id stays open: asking, searching, transferring
    assert grammar.accepts(_turn(chat_format, "Could you give me your user id?"), context)
    assert grammar.accepts(_turn(chat_format, render_tool_call("list_all_airports", {})), context)
    masks = grammar.turn_masks(_turn(chat_format, "Could you give me your user id?"), context)
    assert masks.shape[0] == len(_turn(chat_format, "Could you give me your user id?"))


def test_without_turns_drops_each_turn_from_its_header_through_its_end():
    # 7 8 opens a turn, 9 ends it; the last turn is still open
    assert without_turns([1, 7, 8, 2, 3, 9, 4, 7, 8, 5], [7, 8], 9) == [1, 4]
    assert without_turns([1, 7, 2, 9], [7, 8], 9) == [1, 7, 2, 9]  # no whole header: nothing dropped


def test_copy_from_evidence_ignores_what_the_agent_wrote_itself(chat_format):
    assert chat_format.assistant_header() == chat_format.encode("<|im_start|>assistant\n")
    grammar = chat_format.grammar(len(chat_format.tokenizer), copy_values=True, value_kinds=AIRLINE_ID_KINDS,
                                  evidence_only=True)
    by_kind = chat_format.grammar(len(chat_format.tokenizer), copy_values=True, value_kinds=AIRLINE_ID_KINDS)
    context = chat_format.encode_prompt([
        {"role": "system", "content": chat_format.system_prompt},
        {"role": "user", "content": "Please cancel my trip ABC123."},
        {"role": "assistant", "content": "I check reservation ZFA04Y before anything else."},  # from memory
        {"role": "user", "content": "No, ABC123."}])

    def cancel(reservation, g):
        return g.accepts(_turn(chat_format, render_tool_call("cancel_reservation", {"reservation_id": reservation})),
                         context)

    assert cancel("ABC123", grammar) and cancel("ABC123", by_kind)
    assert not cancel("ZFA04Y", grammar)
    assert cancel("ZFA04Y", by_kind)  # any word of the conversation, the agent's own included
