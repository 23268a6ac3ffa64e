"""The rollout engine's settings (``rollout:`` in every config): sampling and episode limits.

Torch-free, so configs that carry them (evaluation, GRPO) can be built and checked without
importing the engine.
"""
from __future__ import annotations

from dataclasses import dataclass

from agentgrpo.config import require


@dataclass
class RolloutConfig:
    """Sampling and episode limits for the rollout engine."""

    SECTION = "rollout"  # where its checks name its keys; elsewhere (data.rft_rollout) renamed by load_config

    max_turns: int = 30
    """Assistant turns per episode (tool calls, messages and malformed outputs all count)."""
    max_new_tokens: int = 256
    """Tokens one assistant turn may generate before it is cut (an end-of-turn is forced)."""
    max_total_tokens: int = 8192
    """Token budget of a whole episode, prompt included; the episode ends when it is hit."""
    temperature: float = 1.0
    """Sampling temperature; 0 means greedy."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
    max_batch: int = 0
    """Episodes running at once (cache rows); the others join as episodes end. 0 = all at once."""
    compact_threshold: float = 0.125
    """Drop the cache rows of finished episodes once they are this share of the rows (nobody waiting)."""
    share_prefix_min: int = 8
    """Prefill a common prompt prefix once for all episodes if it is at least this long."""
    bucket_rows: int = 32
    """Rows per decode-attention bucket: rows are grouped by length and each bucket reads the
    cache only as far as its longest row (0 = one bucket, as wide as the longest row of all)."""
    regroup_every: int = 128
    """Steps between regroupings of the rows by length (moving a row copies its cache)."""
    constrain_tool_calls: bool = False
    """Schema-guided decoding: every token is drawn from the tokens the turn grammar allows
    next (``agentgrpo.agent.grammar``: a tool call names a known tool and its arguments match
    the tool's JSON schema), and the trainer scores that same restricted distribution."""
    copy_arguments: bool = False
    """With ``constrain_tool_calls``: a string argument the agent copies (an id, a code, a date, a
    name; not a summary or a thought) must be a word of the conversation so far."""
    copy_by_kind: bool = False
    """With ``copy_arguments``: an id argument (``reservation_id``) takes only the conversation's
    ids of its kind (the domain's ``id_kinds``: a reservation code or an ``<R…>`` slot), every
    other copied argument only words that are no id; a tool whose id no one has said yet
    cannot be called."""
    copy_from_evidence: bool = False
    """With ``copy_arguments``: the words copied come from what the user and the tools said, not
    from the agent's own turns (an id it wrote itself, from memory, is no evidence)."""

    def __post_init__(self) -> None:
        for key in ("max_turns", "max_new_tokens", "max_total_tokens"):
            require(getattr(self, key) >= 1, f"rollout.{key}", getattr(self, key), "must be >= 1")
        require(0.0 < self.top_p <= 1.0, "rollout.top_p", self.top_p, "must be in (0, 1]")
        require(self.temperature >= 0, "rollout.temperature", self.temperature, "must be >= 0 (0 = greedy)")
        require(self.max_batch >= 0, "rollout.max_batch", self.max_batch, "must be >= 0 (0 = all episodes at once)")
        require(0.0 <= self.compact_threshold <= 1.0, "rollout.compact_threshold", self.compact_threshold,
                "must be in [0, 1]")
        require(self.bucket_rows >= 0, "rollout.bucket_rows", self.bucket_rows, "must be >= 0 (0 = one bucket)")
        require(self.regroup_every >= 1, "rollout.regroup_every", self.regroup_every, "must be >= 1")
        require(self.constrain_tool_calls or not self.copy_arguments, "rollout.copy_arguments", self.copy_arguments,
                "needs rollout.constrain_tool_calls=true (the copy constraint is part of the tool-call grammar)")
        require(self.copy_arguments or not self.copy_by_kind, "rollout.copy_by_kind", self.copy_by_kind,
                "needs rollout.copy_arguments=true (it narrows the words an argument copies)")
        require(self.copy_arguments or not self.copy_from_evidence, "rollout.copy_from_evidence",
                self.copy_from_evidence, "needs rollout.copy_arguments=true (it narrows the words an argument copies)")
        require(self.share_prefix_min >= 0, "rollout.share_prefix_min", self.share_prefix_min, "must be >= 0")
