"""Batched multi-turn rollouts with continuous batching across turns.

Every running episode owns one row of a ragged KV cache (``RaggedCache``) and advances
on its own: each step is ONE packed forward that decodes a token for every row in the
middle of a turn and, in the same pass, prefills the rows whose turn just ended (the
end of the turn plus the tool result or user reply) or whose episode just started. A row
whose turn ends runs its tool at once and is prefilled at the next step while the others
keep decoding, so nobody waits for the slowest turn of a round; when an episode ends, the
next waiting episode takes its row (``RolloutConfig.max_batch`` rows at most). The
system prompt every episode shares is computed once and copied into each new row. A
turn costs the prefill of its new tokens plus decoding, never a re-encode.

Sampling is as before: one seeded generator draws one uniform per sampled row per step
(rows in the order episodes took them: grouping rows by length for the decode attention
moves their cache, not their draws), so a run is a pure function of its seed; greedy
decoding gives each episode the trajectory it would get alone. With
``RolloutConfig.constrain_tool_calls`` each row's logits are first restricted to what its
turn's grammar allows next (``agentgrpo.agent.grammar``; a matcher per episode, started
afresh after everything said before each turn), and the log-probs are those of that
restricted distribution.

What comes out is one ``Trajectory`` per episode: token ids, the response mask (1 on
sampled tokens), sampling log-probs, turn spans, steps, the conversation as the policy saw
it (``messages``, written from the steps by ``agentgrpo.envs.transcript``; an answer that
ended the episode was never shown, so it is not there: ``Trajectory.transcript`` is the
complete record), the reward.
"""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentgrpo.agent.chat import ChatFormat
from agentgrpo.agent.turn import play_turn
from agentgrpo.agent.types import Trajectory, Turn
from agentgrpo.envs.config import EnvConfig
from agentgrpo.envs.delex import IdKind
from agentgrpo.envs.registry import EpisodeEnv, id_kinds
from agentgrpo.envs.transcript import TranscriptBuilder
from agentgrpo.envs.types import StepResult
from agentgrpo.rollout.attention import ragged_attention
from agentgrpo.rollout.config import RolloutConfig
from agentgrpo.rollout.rows import Rows
from agentgrpo.rollout.sampling import restrict_to_grammar, sample_tokens


@dataclass
class EpisodeSpec:
    """One episode to run: its environment and its place in the GRPO group."""

    env: EpisodeEnv
    task_id: str
    group_id: str
    sample_index: int = 0


@dataclass
class _Live:
    """Book-keeping of one episode: its transcript, trajectory and the tokens it prefills next."""

    spec: EpisodeSpec
    messages: list[dict[str, Any]]    # the chat messages the template renders
    traj: Trajectory
    pending: list[int]
    transcript: TranscriptBuilder     # the same conversation, OpenAI-style, from the steps
    index: int                        # its place in ``run``'s specs
    done: bool = False
    matcher: Any = None               # the tool-call grammar's state in the current turn (constrained)


@dataclass
class RolloutStats:
    """Timings and counts of one ``RolloutEngine.run`` call."""

    episodes: int = 0
    steps: int = 0
    """Packed forwards (each decodes every mid-turn row and prefills the others)."""
    policy_tokens: int = 0
    """Tokens sampled by the policy (the response-mask tokens of all trajectories)."""
    prefill_tokens: int = 0
    """Tokens prefilled: the shared prefix once, prompts, ends of turns, observations."""
    decode_tokens: int = 0
    """Tokens fed one per row to decode."""
    peak_rows: int = 0
    rows_moved: int = 0
    """Rows whose cache moved to group rows of similar length (``RolloutConfig.bucket_rows``)."""
    cache_mb: float = 0.0
    """Largest size of the KV cache buffers."""
    generate_seconds: float = 0.0
    env_seconds: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.policy_tokens / max(self.generate_seconds + self.env_seconds, 1e-9)


def copy_kinds(rollout: RolloutConfig, env: EnvConfig) -> Sequence[IdKind]:
    """The id kinds a ``RolloutEngine`` needs for ``rollout.copy_by_kind`` (none without it)."""
    return id_kinds(env, "rollout.copy_by_kind") if rollout.copy_by_kind else ()


class RolloutEngine:
    """Runs batches of episodes with one model; see the module docstring."""

    def __init__(self, model: torch.nn.Module, chat: ChatFormat, config: RolloutConfig,
                 value_kinds: Sequence[IdKind] = ()):
        """value_kinds: the domain's kinds of id, which ``rollout.copy_by_kind`` needs (``copy_kinds``)."""
        self.model = model
        self.chat = chat
        self.config = config
        self.eos_ids = set(chat.eos_token_ids)
        self.last_stats = RolloutStats()
        if config.copy_by_kind and not any(kind.arguments for kind in value_kinds):
            raise ValueError("rollout.copy_by_kind=true needs the domain's id kinds with the arguments they fill "
                             "(IdKind.arguments); none were given")
        self.grammar = (chat.grammar(model.config.vocab_size, copy_values=config.copy_arguments,
                                     value_kinds=value_kinds if config.copy_by_kind else (),
                                     evidence_only=config.copy_from_evidence)
                        if config.constrain_tool_calls else None)

    @torch.inference_mode()
    def run(self, specs: list[EpisodeSpec], seed: int = 0,
            on_episode_end: Callable[[int, Trajectory], None] | None = None) -> list[Trajectory]:
        """Run every episode to its end; returns trajectories in the order of ``specs``.

        ``on_episode_end(i, trajectory)`` is called the moment episode ``specs[i]`` ends (an
        evaluation logs it then, so a killed run keeps every finished episode).
        """
        stats = self.last_stats = RolloutStats(episodes=len(specs))
        was_training = self.model.training
        self.model.eval()
        ended = on_episode_end or (lambda index, traj: None)
        episodes = [self._start(spec, index) for index, spec in enumerate(specs)]
        for ep in episodes:
            if ep.done:  # its prompt alone is over the token budget
                ended(ep.index, ep.traj)
        waiting = deque(ep for ep in episodes if not ep.done)
        if waiting:
            device = next(self.model.parameters()).device
            generator = torch.Generator(device=device).manual_seed(seed)
            with ragged_attention(self.model):
                self._run_rows(waiting, generator, ended)
        stats.policy_tokens = sum(ep.traj.num_response_tokens for ep in episodes)
        self.model.train(was_training)
        return [ep.traj for ep in episodes]

    def _run_rows(self, waiting: deque[_Live], generator: torch.Generator,
                  ended_episode: Callable[[int, Trajectory], None]) -> None:
        """The continuous-batching loop: step, sample, hand ended turns to the environment."""
        cfg, stats = self.config, self.last_stats
        rows = Rows(self.model, min(len(waiting), cfg.max_batch or len(waiting)), cfg.max_new_tokens,
                    self.chat.eos_token_ids, cfg.bucket_rows)
        shared = self._shared_prefix_length([ep.pending for ep in waiting])
        if shared:
            rows.prefill_prefix(waiting[0].pending[:shared])
            stats.prefill_tokens += shared
        slots: list[_Live | None] = [None] * rows.count
        for row in range(rows.count):
            self._join(rows, slots, row, waiting.popleft())
        stats.peak_rows = rows.count
        while any(ep is not None for ep in slots):
            t0 = time.perf_counter()
            stats.steps += 1
            stats.prefill_tokens += sum(len(chunk) for chunk in rows.pending.values())
            stats.decode_tokens += int(rows.decoding.sum())
            step_rows, logits = rows.step()
            live = [slots[row] for row in step_rows.tolist()] if self.grammar is not None else []
            if live:
                logits = restrict_to_grammar(logits, self.grammar, [ep.matcher for ep in live])
            tokens, logprobs = sample_tokens(logits, cfg.temperature, cfg.top_p, generator)
            for ep, token in zip(live, tokens.tolist()):
                self.grammar.advance(ep.matcher, token)
            ended = rows.record(step_rows, tokens, logprobs)
            t1 = time.perf_counter()
            for row in ended:
                self._end_turn(rows, slots, row, waiting, ended_episode)
            stats.generate_seconds += t1 - t0
            stats.env_seconds += time.perf_counter() - t1
            stats.cache_mb = max(stats.cache_mb, rows.cache.nbytes() / 2**20)
            idle = sum(ep is None for ep in slots)
            if not waiting and idle and idle >= cfg.compact_threshold * rows.count:
                keep = [row for row, ep in enumerate(slots) if ep is not None]
                if keep:
                    rows.keep(keep)
                    slots = [slots[row] for row in keep]
            if stats.steps % cfg.regroup_every == 0:
                order = rows.regroup()
                if order is not None:
                    stats.rows_moved += sum(new != old for new, old in enumerate(order))
                    slots = [slots[row] for row in order]

    def _shared_prefix_length(self, prompts: list[list[int]]) -> int:
        """Tokens at the start of every prompt (keeping >= 1 of each), or 0 if below ``share_prefix_min``."""
        if len(prompts) < 2:
            return 0
        shared = min(_common_prefix_length(prompts), min(len(p) for p in prompts) - 1)
        return shared if shared >= max(self.config.share_prefix_min, 1) else 0

    # -- episode life cycle ------------------------------------------------------------
    def _start(self, spec: EpisodeSpec, index: int) -> _Live:
        first_user_message = spec.env.reset()
        messages = [
            {"role": "system", "content": self.chat.system_prompt},
            {"role": "user", "content": first_user_message},
        ]
        prompt = self.chat.encode_prompt(messages)
        traj = Trajectory(task_id=spec.task_id, group_id=spec.group_id, sample_index=spec.sample_index)
        traj.token_ids = list(prompt)
        traj.response_mask = [0] * len(prompt)
        traj.logprobs = [0.0] * len(prompt)
        ep = _Live(spec=spec, messages=messages, traj=traj, pending=list(prompt),
                   transcript=TranscriptBuilder(messages), index=index,
                   matcher=self.grammar.matcher(prompt) if self.grammar is not None else None)
        if len(prompt) + 2 > self.config.max_total_tokens:
            self._finish(ep, spec.env.finish("token_budget"))
        return ep

    def _join(self, rows: Rows, slots: list[_Live | None], row: int, ep: _Live) -> None:
        """``ep`` takes ``row``: the shared prefix is there already, the rest of its prompt is queued."""
        slots[row] = ep
        rows.start(row, ep.pending[rows.cache.prefix_length :], self._budget(ep))

    def _budget(self, ep: _Live) -> int:
        room = self.config.max_total_tokens - len(ep.traj.token_ids) - 1  # keep a slot for a forced end-of-turn
        return max(1, min(self.config.max_new_tokens, room))

    def _end_turn(self, rows: Rows, slots: list[_Live | None], row: int, waiting: deque[_Live],
                  ended_episode: Callable[[int, Trajectory], None]) -> None:
        """Play the turn ``row`` just ended; queue the episode's next chunk, or free the row."""
        ep = slots[row]
        assert ep is not None
        generated, logprobs = rows.turn(row)
        self._apply_turn(ep, generated, logprobs)
        if not ep.done:
            rows.queue(row, ep.pending, self._budget(ep))
            return
        ended_episode(ep.index, ep.traj)
        if waiting:
            self._join(rows, slots, row, waiting.popleft())
        else:
            slots[row] = None
            rows.release(row)

    def _apply_turn(self, ep: _Live, generated: list[int], logprobs: list[float]) -> None:
        traj, cfg = ep.traj, self.config
        start = len(traj.token_ids)
        traj.token_ids += generated
        traj.response_mask += [1] * len(generated)
        traj.logprobs += logprobs
        # the last sampled token has not been through the model yet: it leads the next chunk
        ep.pending = [generated[-1]]
        ended_cleanly = generated[-1] in self.eos_ids
        body = generated[:-1] if ended_cleanly else generated
        if not ended_cleanly:  # cut at max_new_tokens: close the turn for the template
            forced = self.chat.eos_token_ids[0]
            traj.token_ids.append(forced)
            traj.response_mask.append(0)
            traj.logprobs.append(0.0)
            ep.pending.append(forced)
        text = self.chat.decode(body)
        # malformed turns never reach the environment
        _, outcome = play_turn(ep.spec.env, text, self.chat.tool_names, self.chat.end_markers)
        step = outcome.step
        traj.steps.append(step)
        traj.turns.append(Turn(start=start, end=start + len(generated), step=step))
        ep.messages.append({"role": "assistant", "content": text})
        ep.transcript.add_assistant(step)
        if outcome.done:
            self._finish(ep, outcome.result)
            return
        if len(traj.turns) >= cfg.max_turns:
            self._finish(ep, ep.spec.env.finish("max_turns"))
            return
        new_message = {"role": outcome.reply_role, "content": step.observation}
        delta = self.chat.encode_delta(ep.messages, [new_message])
        ep.messages.append(new_message)
        ep.transcript.add_reply(outcome.reply_role, step.observation)
        if len(traj.token_ids) + len(delta) + 2 > cfg.max_total_tokens:  # no room for one more token
            self._finish(ep, ep.spec.env.finish("token_budget"))
            return
        traj.token_ids += delta
        traj.response_mask += [0] * len(delta)
        traj.logprobs += [0.0] * len(delta)
        ep.pending += delta
        if self.grammar is not None:  # the next turn's grammar, after everything said so far
            ep.matcher = self.grammar.matcher(traj.token_ids)

    def _finish(self, ep: _Live, result: StepResult) -> None:
        ep.done = True
        traj = ep.traj
        traj.outcome_reward = float(result.reward)
        traj.termination = result.info.get("termination", "user_stop")
        traj.info.update({k: v for k, v in result.info.items() if k != "termination"})
        traj.messages = ep.transcript.messages


def _common_prefix_length(sequences: list[list[int]]) -> int:
    if not sequences:
        return 0
    first, n = sequences[0], min(len(s) for s in sequences)
    for i in range(n):
        token = first[i]
        if any(s[i] != token for s in sequences):
            return i
    return n
