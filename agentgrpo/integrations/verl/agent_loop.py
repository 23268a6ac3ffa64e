"""``AirlineAgentLoop``: veRL's multi-turn rollout of one airline episode (tools + user simulator).

Registered out of tree by ``configs/agent_loop.yaml`` (``actor_rollout_ref.rollout.agent.
agent_loop_config_path``); dataset rows select it with ``agent_name: agentgrpo_airline``
(``data.py`` writes that column). For each row veRL instantiates the loop and awaits
``run(sampling_params, **row)``; we

1. rebuild the row's task (``extra_info``) and start an ``AirlineEpisode``, whose user
   simulator is scripted (offline) or an LLM behind an OpenAI-compatible server (the
   seed's 72B-AWQ user on the second GPU; ``AGENTGRPO_USER_BASE_URL`` etc.);
2. tokenise the opening with ``ChatFormat`` (the policy and tool schemas in the system
   message, Hermes ``<tool_call>`` blocks — Qwen2.5's own tool format);
3. loop: generate one assistant turn on veRL's server (mask 1, its log-probs), parse
   and execute it, append the tool result or user reply as the template renders it
   (``ChatFormat.encode_delta``: appended tokens, never a re-encoding; mask 0);
4. grade the episode and return ``AgentLoopOutput`` with the response mask (one run of
   ones per assistant turn — the turns Turn-Discount and LLDS work on), the reward
   ``outcome + AGENTGRPO_PRM_COEF · PRM-Lite`` and the transcript in ``extra_fields``
   (so ``reward.compute_score`` can re-score it).

The environment side (tools, users, blocking HTTP for the LLM user) runs in a thread so
the event loop keeps serving the other episodes. Works with veRL 0.6.1–0.9.x: only
``AgentLoopBase``'s stable constructor and ``server_manager.generate(request_id,
prompt_ids=, sampling_params=)`` are used.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput

from agentgrpo.agent.chat import ChatFormat
from agentgrpo.integrations.verl.episode import AirlineEpisode
from agentgrpo.integrations.verl.reward import OUTCOME_KEY, TERMINATION_KEY, TRANSCRIPT_KEY, score_transcript

AGENT_NAME = "agentgrpo_airline"

_formats: dict[tuple[int, str], ChatFormat] = {}
_formats_lock = threading.Lock()


def chat_format_for(tokenizer: Any, domain: Any, system_prompt: str) -> ChatFormat:
    """One ``ChatFormat`` per (tokenizer, system prompt) and process: a loop is built per sample."""
    key = (id(tokenizer), system_prompt)
    with _formats_lock:
        if key not in _formats:
            _formats[key] = ChatFormat(
                tokenizer, domain.tool_schemas(), domain.policy, system_prompt=system_prompt
            )
        return _formats[key]


def system_prompt_of(raw_prompt: Any) -> str | None:
    """The system message of the dataset row's prompt (``data.py`` stores the full one there)."""
    for message in list(raw_prompt if raw_prompt is not None else []):
        if isinstance(message, dict) and message.get("role") == "system":
            return str(message.get("content") or "")
    return None


def token_output(output: Any) -> tuple[list[int], list[float] | None]:
    """``(token_ids, log_probs)`` of ``server_manager.generate``'s result (a ``TokenOutput``)."""
    ids = list(getattr(output, "token_ids", output))
    logprobs = getattr(output, "log_probs", None)
    return ids, (list(logprobs) if logprobs else None)


class AirlineAgentLoop(AgentLoopBase):
    """veRL agent loop over ``AirlineEpisode``; see the module docstring.

    Args (from the agent-loop YAML; the rest go to ``AgentLoopBase``):
        max_turns: assistant turns per episode (malformed ones count).
        max_tokens_per_turn: cap one generation (``max_tokens``; veRL ≥ 0.7 servers
            honour it, 0.6's reject it, so leave it null there).
        user_seed: seed of the scripted user's phrasing.
    """

    def __init__(
        self,
        *args: Any,
        max_turns: int = 30,
        max_tokens_per_turn: int | None = None,
        user_seed: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.max_turns = int(max_turns)
        self.max_tokens_per_turn = None if max_tokens_per_turn is None else int(max_tokens_per_turn)
        self.user_seed = int(user_seed)
        self.response_length = int(self.config.actor_rollout_ref.rollout.response_length)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        extra_info = dict(kwargs.get("extra_info") or {})
        system_prompt = system_prompt_of(kwargs.get("raw_prompt"))
        episode = AirlineEpisode.from_extra_info(
            extra_info, system_prompt, self.user_seed, self.max_turns
        )
        chat = chat_format_for(self.tokenizer, episode.env.domain, episode.system_prompt)
        loop = asyncio.get_running_loop()
        opening = await loop.run_in_executor(None, episode.start)
        prompt_ids = chat.encode_prompt(opening)
        tokens = _ResponseTokens()
        request_id = uuid4().hex
        while not episode.done:
            room = self.response_length - len(tokens.ids)
            if room <= 0:
                episode.finish("token_budget")
                break
            generated, logprobs = await self._generate(
                request_id, prompt_ids + tokens.ids, sampling_params, room
            )
            body = tokens.add_turn(generated[:room], logprobs, chat.eos_token_ids, room)
            reply = await loop.run_in_executor(None, episode.act, chat.decode(body), chat.end_markers)
            if reply is None:
                break
            delta = chat.encode_delta(episode.chat_messages[:-1], [reply])
            if len(tokens.ids) + len(delta) >= self.response_length:
                episode.finish("token_budget")
                break
            tokens.add_context(delta)
        return self._output(prompt_ids, tokens, episode)

    async def _generate(
        self, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any], room: int
    ) -> tuple[list[int], list[float] | None]:
        params = dict(sampling_params)
        if self.max_tokens_per_turn is not None:
            params["max_tokens"] = max(1, min(self.max_tokens_per_turn, room))
        output = await self.server_manager.generate(
            request_id=request_id, prompt_ids=prompt_ids, sampling_params=params
        )
        return token_output(output)

    def _output(
        self, prompt_ids: list[int], tokens: _ResponseTokens, episode: AirlineEpisode
    ) -> AgentLoopOutput:
        scores = score_transcript(episode.transcript, episode.outcome)
        extra = {
            TRANSCRIPT_KEY: json.dumps(episode.transcript, ensure_ascii=False),
            OUTCOME_KEY: episode.outcome,
            "agentgrpo_process_score": scores["process_score"],
            TERMINATION_KEY: episode.termination,
            "agentgrpo_has_error": float(episode.has_error),
        }
        n = self.response_length
        return AgentLoopOutput(
            prompt_ids=list(prompt_ids),
            response_ids=tokens.ids[:n],
            response_mask=tokens.mask[:n],
            response_logprobs=tokens.logprobs[:n] if tokens.has_logprobs else None,
            reward_score=scores["score"],
            num_turns=len(episode.chat_messages) - 1,  # user, assistant and tool messages
            metrics={},
            extra_fields=extra,
        )


class _ResponseTokens:
    """The response side of one episode: ids, the policy mask and rollout log-probs, aligned."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        self.has_logprobs = True

    def add_turn(
        self, generated: list[int], logprobs: list[float] | None, eos_ids: list[int], room: int
    ) -> list[int]:
        """Append a sampled turn (mask 1); returns its body without the end-of-turn token.

        A turn cut before its end-of-turn token gets one appended with mask 0, so the
        context stays well-formed for the template (as ``agentgrpo.rollout`` does).
        """
        self.has_logprobs = self.has_logprobs and logprobs is not None
        self.ids += generated
        self.mask += [1] * len(generated)
        self.logprobs += list(logprobs[: len(generated)]) if logprobs else [0.0] * len(generated)
        closed = bool(generated) and generated[-1] in eos_ids
        if not closed and len(generated) < room:
            self.add_context([eos_ids[0]])
        return generated[:-1] if closed else generated

    def add_context(self, ids: list[int]) -> None:
        """Append tokens the policy did not sample (tool results, user replies): mask 0."""
        self.ids += ids
        self.mask += [0] * len(ids)
        self.logprobs += [0.0] * len(ids)
