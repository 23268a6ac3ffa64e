"""The round-based rollout engine as it was before continuous batching: the test oracle.

Every round, each episode waiting on the agent gets one batched generation, then its
action goes to the environment and the answer is appended to its token stream, in a
shared-slot KV cache with holes (``oracle_cache``). ``RolloutEngine`` must produce the
same trajectories under greedy decoding, token for token (``test_equivalence.py``). Kept
as it was, apart from taking ``RolloutConfig`` and ``EpisodeSpec`` from the package.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from agentgrpo.agent.chat import ChatFormat
from agentgrpo.agent.turn import play_turn
from agentgrpo.agent.types import Trajectory, Turn
from agentgrpo.envs.types import StepResult
from agentgrpo.rollout.config import RolloutConfig
from agentgrpo.rollout.engine import EpisodeSpec
from agentgrpo.rollout.sampling import sample_tokens

from .oracle_cache import GrowableCache, forward_chunk


@dataclass
class _Live:
    """Book-keeping of one running episode."""

    spec: EpisodeSpec
    messages: list[dict[str, Any]]
    traj: Trajectory
    pending: list[int] = field(default_factory=list)
    generated: list[int] = field(default_factory=list)
    generated_logprobs: list[float] = field(default_factory=list)
    done: bool = False


@dataclass
class OracleStats:
    """Timings and counts of one ``RolloutEngine.run`` call."""

    episodes: int = 0
    rounds: int = 0
    policy_tokens: int = 0
    prefill_tokens: int = 0
    prefill_forwards: int = 0
    generate_seconds: float = 0.0
    env_seconds: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.policy_tokens / max(self.generate_seconds + self.env_seconds, 1e-9)


class OracleEngine:
    """Runs batches of episodes with one model; see the module docstring."""

    def __init__(self, model: torch.nn.Module, chat: ChatFormat, config: RolloutConfig):
        self.model = model
        self.chat = chat
        self.config = config
        self.eos_ids = set(chat.eos_token_ids)
        self.last_stats = OracleStats()

    @torch.inference_mode()
    def run(self, specs: list[EpisodeSpec], seed: int = 0) -> list[Trajectory]:
        """Run every episode to its end; returns trajectories in the order of ``specs``."""
        stats = self.last_stats = OracleStats(episodes=len(specs))
        generator = torch.Generator(device="cpu").manual_seed(seed)
        was_training = self.model.training
        self.model.eval()
        live = [self._start(spec) for spec in specs]
        rows = [ep for ep in live if not ep.done]
        cache = self._prefill_shared_prefix(rows)
        while rows:
            stats.rounds += 1
            t0 = time.perf_counter()
            self._generate_turn(rows, cache, generator)
            t1 = time.perf_counter()
            for ep in rows:
                self._apply_turn(ep)
            stats.generate_seconds += t1 - t0
            stats.env_seconds += time.perf_counter() - t1
            keep = [i for i, ep in enumerate(rows) if not ep.done]
            if len(keep) < len(rows) and keep:
                cache.select_rows(torch.tensor(keep, dtype=torch.long))
            rows = [rows[i] for i in keep]
            if rows and cache.hole_fraction() > self.config.compact_threshold:
                cache.compact()
        stats.policy_tokens = sum(ep.traj.num_response_tokens for ep in live)
        self.model.train(was_training)
        return [ep.traj for ep in live]

    # -- episode start -------------------------------------------------------------
    def _start(self, spec: EpisodeSpec) -> _Live:
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
        ep = _Live(spec=spec, messages=messages, traj=traj, pending=list(prompt))
        if len(prompt) + 2 > self.config.max_total_tokens:
            self._finish(ep, spec.env.finish("token_budget"))
        return ep

    def _prefill_shared_prefix(self, rows: list[_Live]) -> GrowableCache:
        """Prefill the longest prompt prefix all episodes share once, then broadcast it."""
        if not rows:
            return GrowableCache(0)
        shared = _common_prefix_length([ep.pending for ep in rows])
        shared = min(shared, min(len(ep.pending) for ep in rows) - 1)  # keep >= 1 token per row
        if len(rows) < 2 or shared < self.config.share_prefix_min:
            return GrowableCache(len(rows))
        cache = GrowableCache(1)
        forward_chunk(self.model, cache, [rows[0].pending[:shared]], self.chat.pad_token_id)
        cache.repeat_rows(len(rows))
        self.last_stats.prefill_tokens += shared
        for ep in rows:
            ep.pending = ep.pending[shared:]
        return cache

    # -- one batched assistant turn --------------------------------------------------
    def _generate_turn(self, rows: list[_Live], cache: GrowableCache, generator: torch.Generator) -> None:
        cfg = self.config
        budgets = []
        for ep in rows:
            room = cfg.max_total_tokens - len(ep.traj.token_ids) - 1  # keep a slot for a forced end-of-turn
            budgets.append(max(1, min(cfg.max_new_tokens, room)))
            ep.generated, ep.generated_logprobs = [], []
        logits = self._prefill_pending(rows, cache)
        active = [True] * len(rows)
        # rows decoded by ``current``: all of them, or (once most have ended their turn) a copy
        # of the few still generating, so finished rows stop costing compute until the turn ends
        current, members = cache, list(range(len(rows)))
        while True:
            tokens, logprobs = sample_tokens(logits, cfg.temperature, cfg.top_p, generator)
            for i, token, logprob in zip(members, tokens.tolist(), logprobs.tolist()):
                if not active[i]:
                    continue
                ep = rows[i]
                ep.generated.append(token)
                ep.generated_logprobs.append(logprob)
                if token in self.eos_ids or len(ep.generated) >= budgets[i]:
                    active[i] = False
            alive = [i for i in members if active[i]]
            if not alive:
                break
            if len(members) >= 4 and len(alive) <= len(members) // PARK_RATIO:
                if current is not cache:
                    cache.put_back(current, torch.tensor(members))
                current, members = cache.take_rows(torch.tensor(alive)), alive
            feed = [[rows[i].generated[-1]] if active[i] else [] for i in members]
            logits = forward_chunk(self.model, current, feed, self.chat.pad_token_id)
        if current is not cache:
            cache.put_back(current, torch.tensor(members))

    def _prefill_pending(self, rows: list[_Live], cache: GrowableCache) -> torch.Tensor:
        """Append every row's pending tokens; returns (B, V) logits at each row's last token.

        Pending chunks differ widely (a 20-token user reply next to a 600-token flight
        search), and one padded forward would cost rows x longest. So rows are grouped by
        length: each group of long chunks runs on a copy of its own rows, and the shortest
        group runs on the whole cache (the other rows add holes there, not work).
        """
        pad = self.chat.pad_token_id
        lengths = [len(ep.pending) for ep in rows]
        self.last_stats.prefill_tokens += sum(lengths)
        *side_groups, main_group = prefill_groups(lengths, PREFILL_GROUP_OVERHEAD_TOKENS)
        self.last_stats.prefill_forwards += len(side_groups) + 1
        parts = []
        for group in side_groups:
            index = torch.tensor(group)
            part = cache.take_rows(index)
            parts.append((index, forward_chunk(self.model, part, [rows[i].pending for i in group], pad)))
            cache.put_back(part, index)
        in_main = set(main_group)
        chunks = [ep.pending if i in in_main else [] for i, ep in enumerate(rows)]
        logits = forward_chunk(self.model, cache, chunks, pad)
        for index, part_logits in parts:
            logits[index] = part_logits
        return logits

    # -- environment side -------------------------------------------------------------
    def _apply_turn(self, ep: _Live) -> None:
        traj, cfg = ep.traj, self.config
        start = len(traj.token_ids)
        traj.token_ids += ep.generated
        traj.response_mask += [1] * len(ep.generated)
        traj.logprobs += ep.generated_logprobs
        # the last sampled token has not been through the model yet: it leads the next chunk
        ep.pending = [ep.generated[-1]]
        ended_cleanly = ep.generated[-1] in self.eos_ids
        body = ep.generated[:-1] if ended_cleanly else ep.generated
        if not ended_cleanly:  # cut at max_new_tokens: close the turn for the template
            forced = self.chat.eos_token_ids[0]
            traj.token_ids.append(forced)
            traj.response_mask.append(0)
            traj.logprobs.append(0.0)
            ep.pending.append(forced)
        text = self.chat.decode(body)
        _, outcome = play_turn(ep.spec.env, text, self.chat.tool_names)  # malformed turns never reach it
        step = outcome.step
        traj.steps.append(step)
        traj.turns.append(Turn(start=start, end=start + len(ep.generated), step=step))
        ep.messages.append({"role": "assistant", "content": text})
        if outcome.done:
            self._finish(ep, outcome.result)
            return
        if len(traj.turns) >= cfg.max_turns:
            self._finish(ep, ep.spec.env.finish("max_turns"))
            return
        new_message = {"role": outcome.reply_role, "content": step.observation}
        delta = self.chat.encode_delta(ep.messages, [new_message])
        ep.messages.append(new_message)
        if len(traj.token_ids) + len(delta) + 2 > cfg.max_total_tokens:  # no room for one more token
            self._finish(ep, ep.spec.env.finish("token_budget"))
            return
        traj.token_ids += delta
        traj.response_mask += [0] * len(delta)
        traj.logprobs += [0.0] * len(delta)
        ep.pending += delta

    def _finish(self, ep: _Live, result: StepResult) -> None:
        ep.done = True
        traj = ep.traj
        traj.outcome_reward = float(result.reward)
        traj.termination = result.info.get("termination", "user_stop")
        traj.info.update({k: v for k, v in result.info.items() if k != "termination"})
        traj.messages = self.chat.openai_messages(ep.messages)


PARK_RATIO = 4
"""Decode the rows still generating apart once they are at most 1/PARK_RATIO of the turn's rows."""

PREFILL_GROUP_OVERHEAD_TOKENS = 64
"""Fixed cost of one extra prefill forward (launch, row copies), in token-forwards."""


def prefill_groups(lengths: list[int], overhead: float) -> list[list[int]]:
    """Split rows into prefill groups minimising padded token-forwards + overhead per group.

    Rows are taken longest first; a side group of rows costs ``len(group) * its longest
    + overhead``, and the last group (the shortest chunks) costs ``len(lengths) * its
    longest``, as it runs on the whole batch. Exact dynamic programme over the sorted
    lengths. Returns lists of row indices; the last one is the main group (non-empty
    unless ``lengths`` is).
    """
    n = len(lengths)
    if n == 0:
        return [[]]
    order = sorted(range(n), key=lambda i: -lengths[i])
    sorted_lengths = [lengths[i] for i in order]
    # best[j]: cheapest cost of putting sorted rows [0, j) into side groups; cut[j]: its last start
    best, cut = [0.0] + [float("inf")] * n, [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j):
            cost = best[i] + (j - i) * sorted_lengths[i] + overhead
            if cost < best[j]:
                best[j], cut[j] = cost, i
    main_start = min(range(n), key=lambda k: best[k] + n * sorted_lengths[k])
    groups, j = [], main_start
    while j > 0:
        groups.append(order[cut[j]:j])
        j = cut[j]
    groups.reverse()
    groups.append(order[main_start:])
    return groups


def _common_prefix_length(sequences: list[list[int]]) -> int:
    if not sequences:
        return 0
    first, n = sequences[0], min(len(s) for s in sequences)
    for i in range(n):
        token = first[i]
        if any(s[i] != token for s in sequences):
            return i
    return n
