"""The packaged budgets fit the job: every oracle episode of every family, as the delexicalised
tiny policy sees it, fits the evaluation's and GRPO's turn, token-per-turn and episode budgets
(a budget below the gold makes a family unwinnable whatever the policy does)."""
from __future__ import annotations

import pytest

from agentgrpo.agent.chat import ChatFormat, policy_view
from agentgrpo.config import load_config
from agentgrpo.envs.airline.factory import EnvConfig, build_env
from agentgrpo.envs.delex import delexicalise_messages, slot_tokens
from agentgrpo.envs.episode import run_episode
from agentgrpo.envs.registry import domain_oracle, id_kinds, make_env
from agentgrpo.eval.config import EvalConfig
from agentgrpo.policy.tokenizer import domain_corpus, train_tokenizer
from agentgrpo.train.grpo_config import GRPOConfig


@pytest.fixture(scope="module")
def oracle_sizes():
    """(assistant turns, longest turn + its end-of-turn, whole episode) of each oracle episode."""
    config = EnvConfig(delexicalise=True)
    bundle = build_env(config)
    tokenizer = train_tokenizer(domain_corpus(bundle.domain), vocab_size=4096,
                                atomic_texts=slot_tokens(id_kinds(config)))
    chat = ChatFormat(tokenizer, bundle.domain.tool_schemas(), bundle.domain.policy, prompt_style="compact")
    sizes = {}
    for task in bundle.tasks():
        result = run_episode(make_env(bundle, task, config, user_seed=0, delexicalise=False),
                             domain_oracle(config, bundle, task))
        messages = policy_view(chat, delexicalise_messages(result.messages, id_kinds(config)))
        turns = [len(chat.encode(m["content"])) + 1 for m in messages if m["role"] == "assistant"]
        size = (len(turns), max(turns), len(chat.encode(chat.render(messages, False))))
        sizes[task.family] = tuple(max(a, b) for a, b in zip(sizes.get(task.family, size), size))
    return sizes


@pytest.mark.parametrize("schema", [EvalConfig, GRPOConfig], ids=["eval.yaml", "grpo.yaml"])
def test_every_oracle_episode_fits_the_packaged_budgets(oracle_sizes, schema):
    rollout = load_config(schema, []).rollout
    assert len(oracle_sizes) == 23
    too_long = {family: size for family, size in oracle_sizes.items()
                if size[0] > rollout.max_turns or size[1] > rollout.max_new_tokens
                or size[2] > rollout.max_total_tokens}
    assert too_long == {}
    assert max(size[1] for size in oracle_sizes.values()) > 160  # a booking call: the old budget cut it
