"""What the rollout engine is measured against (``rollout.py``).

- ``naive_rollout``: the multi-turn loop a user would write with HF transformers. Every
  turn it re-encodes each live conversation with the chat template, left-pads the batch,
  calls ``model.generate`` once, cuts each row at its end-of-turn, plays the text on the
  environment (the same ``play_turn`` as the engine) and appends the reply; episodes end
  on the same rules and limits as in the engine.
- ``ceiling_generate``: the same token work as an engine run with no book-keeping at all:
  ONE ``model.generate`` call, a row per episode, whose prompts hold as many tokens in all
  as the engine prefilled and which decodes as many tokens as the engine sampled
  (``min_new_tokens`` = ``max_new_tokens``, so no row stops early).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import GenerationConfig

from agentgrpo.agent.chat import ChatFormat
from agentgrpo.agent.turn import play_turn
from agentgrpo.rollout.config import RolloutConfig
from agentgrpo.rollout.engine import EpisodeSpec


@dataclass
class NaiveStats:
    episodes: int = 0
    turns: int = 0
    sampled_tokens: int = 0
    """Tokens generate() returned before each row's end-of-turn (the end-of-turn included)."""
    encoded_tokens: int = 0
    """Prompt tokens fed to generate() (re-encoded conversations, padding excluded)."""


def left_padded(prompts: list[list[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), each (B, longest prompt), padded on the left as generate wants."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, prompt in enumerate(prompts):
        input_ids[row, width - len(prompt):] = torch.tensor(prompt)
        attention_mask[row, width - len(prompt):] = 1
    return input_ids, attention_mask


def generation_config(chat: ChatFormat, config: RolloutConfig, new_tokens: int,
                      min_new_tokens: int = 0) -> GenerationConfig:
    sampling = {"do_sample": True, "temperature": config.temperature, "top_k": 0, "top_p": config.top_p}
    return GenerationConfig(max_new_tokens=new_tokens, min_new_tokens=min_new_tokens,
                            eos_token_id=chat.eos_token_ids, pad_token_id=chat.pad_token_id,
                            **(sampling if config.temperature > 0 else {"do_sample": False}))


@torch.inference_mode()
def naive_rollout(model: torch.nn.Module, chat: ChatFormat, specs: list[EpisodeSpec],
                  config: RolloutConfig, seed: int) -> NaiveStats:
    """Run ``specs`` to their ends with re-encode + batched ``generate`` per turn."""
    torch.manual_seed(seed)
    model.eval()
    stats = NaiveStats(episodes=len(specs))
    conversations = [chat.initial_messages(spec.env.reset()) for spec in specs]
    turns = [0] * len(specs)
    live = list(range(len(specs)))
    eos = set(chat.eos_token_ids)
    gen_config = generation_config(chat, config, config.max_new_tokens)
    while live:
        prompts = [chat.encode_prompt(conversations[i]) for i in live]
        fits = [len(p) + config.max_new_tokens <= config.max_total_tokens for p in prompts]
        for i, ok in zip(live, fits):
            if not ok:
                specs[i].env.finish("token_budget")
        prompts = [p for p, ok in zip(prompts, fits) if ok]
        live = [i for i, ok in zip(live, fits) if ok]
        if not live:
            break
        input_ids, attention_mask = left_padded(prompts, chat.pad_token_id)
        output = model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=gen_config)
        stats.encoded_tokens += sum(len(p) for p in prompts)
        still = []
        for row, i in enumerate(live):
            new = output[row, input_ids.shape[1]:].tolist()
            end = next((k for k, token in enumerate(new) if token in eos), None)
            body = new if end is None else new[:end]
            stats.sampled_tokens += len(body) + (end is not None)
            text = chat.decode(body)
            _, outcome = play_turn(specs[i].env, text, chat.tool_names, chat.end_markers)
            conversations[i].append({"role": "assistant", "content": text})
            turns[i] += 1
            stats.turns += 1
            if outcome.done:
                continue
            if turns[i] >= config.max_turns:
                specs[i].env.finish("max_turns")
                continue
            conversations[i].append({"role": outcome.reply_role, "content": outcome.step.observation})
            still.append(i)
        live = still
    return stats


@torch.inference_mode()
def ceiling_generate(model: torch.nn.Module, chat: ChatFormat, token_ids: list[list[int]], prompt_tokens: int,
                     new_tokens: int, config: RolloutConfig, seed: int) -> int:
    """One ``generate`` of ``new_tokens`` per row after prompts of ``prompt_tokens`` each.

    token_ids: one token stream per row (the engine's trajectories), cut or cycled to length;
    returns the tokens generated.
    """
    prompts = [(ids * (prompt_tokens // max(len(ids), 1) + 1))[:prompt_tokens] for ids in token_ids]
    input_ids, attention_mask = left_padded(prompts, chat.pad_token_id)
    torch.manual_seed(seed)
    model.eval()
    output = model.generate(input_ids=input_ids, attention_mask=attention_mask,
                            generation_config=generation_config(chat, config, new_tokens, new_tokens))
    return (output.shape[1] - input_ids.shape[1]) * output.shape[0]
