"""Per-token log-probs of whole conversations for training: the forward pass of SFT and GRPO.

Two savings over ``model(input_ids).logits``, both exact:

* The vocabulary projection runs only where a score is needed (assistant tokens): on
  an airline episode that is ~25% of the positions, and the (B, T, V) logits tensor is
  never built.
* Every trajectory of a GRPO batch (and every SFT transcript) starts with the same
  system prompt. Optionally the prefix is run once with batch size 1 and its keys/values
  broadcast to the batch; gradients flow through the broadcast, so the result and its
  gradient equal the plain batched forward (tests check both).

``PolicyForward`` may also ``torch.compile`` the decoder (2–3× faster on CPU for the tiny
presets, after a one-off compile of about a minute). Inputs may live on the CPU: they are
moved to the model's device, and on CUDA the pass runs under bfloat16 autocast
(``autocast=True``; device types such as ``("cuda", "cpu")`` name where: ``policy.cpu_autocast``).
A PEFT (LoRA) model is unwrapped to its adapted base, whose layers carry the adapters. With
gradient checkpointing on, the prefix is not shared (the checkpointed decoder keeps no cache in
training mode).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.cache_utils import DynamicCache

from agentgrpo.algos import TokenMasks, entropy_from_logits, logprobs_from_logits, restrict_logits
from agentgrpo.policy.device import AutocastOn, autocast, model_device

# Architectures whose causal-LM head is exactly ``lm_head(hidden)`` (no logit scaling or
# soft-capping), so projecting only the needed positions is exact.
_PLAIN_HEAD_MODEL_TYPES = {"llama", "mistral", "qwen2", "qwen3", "smollm3", "phi3"}


@dataclass
class TokenScores:
    """logprobs[b, t] = log p(x_t | x_<t) where scored (0 elsewhere); entropy likewise."""

    logprobs: torch.Tensor  # (B, T)
    entropy: torch.Tensor | None = None  # (B, T)


def shared_prefix_length(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> int:
    """Length of the token prefix that every row shares (and that is not padding)."""
    if input_ids.shape[0] == 0:
        return 0
    same = (input_ids == input_ids[:1]).all(dim=0) & attention_mask.bool().all(dim=0)
    if bool(same.all()):
        return int(same.numel())
    return int(same.long().argmin().item())


class PolicyForward:
    """The training forward of one causal LM (optionally compiled).

    share_prefix: run a common prompt prefix once per batch (eager mode only; a compiled
        decoder runs plain batches, which keeps its graph static).
    """

    def __init__(self, model: torch.nn.Module, compile: bool = False, share_prefix: bool = True,
                 min_shared: int = 64, autocast: AutocastOn = True):
        self.model = model
        base = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT: adapters live inside
        self.decoder = getattr(base, base.base_model_prefix)
        self.head = base.get_output_embeddings()
        self.sparse_head = getattr(base.config, "model_type", "") in _PLAIN_HEAD_MODEL_TYPES
        self.compiled = compile
        self._decoder_fn = torch.compile(self.decoder, dynamic=True) if compile else self.decoder
        self.share_prefix = share_prefix and not compile
        self.min_shared = min_shared
        self.autocast = autocast

    @property
    def device(self) -> torch.device:
        return model_device(self.model)

    def token_logprobs(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        score_mask: torch.Tensor | None = None,
        *,
        temperature: float = 1.0,
        with_entropy: bool = False,
        entropy_grad: bool = False,
        token_masks: TokenMasks | None = None,
    ) -> TokenScores:
        """Scores of the tokens in ``score_mask`` (default: every non-padding token but the first).

        input_ids, attention_mask, score_mask: (B, T), right-padded. ``temperature``
        divides the logits first, matching a sampler with that temperature (as veRL does).
        The entropy is computed without autograd (it is only logged) unless
        ``entropy_grad`` asks for it (an entropy bonus in the loss). ``token_masks``: the
        tokens a constrained sampler allowed at each position; the scores are then those of
        the policy restricted to them, the distribution it sampled from. The outputs are
        float32 on the model's device.
        """
        device = self.device
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        score_mask = score_mask.to(device) if score_mask is not None else None
        token_masks = token_masks.to(device) if token_masks is not None else None
        with autocast(device, self.autocast):
            return self._scores(input_ids, attention_mask, score_mask, temperature, with_entropy, entropy_grad,
                                token_masks)

    def _scores(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, score_mask: torch.Tensor | None,
                temperature: float, with_entropy: bool, entropy_grad: bool,
                token_masks: TokenMasks | None) -> TokenScores:
        wanted = attention_mask.bool() if score_mask is None else score_mask.bool() & attention_mask.bool()
        wanted = wanted.clone()
        wanted[:, 0] = False  # the first token has no prediction
        # hidden state t-1 predicts token t
        predictors = torch.zeros_like(wanted)
        predictors[:, :-1] = wanted[:, 1:]
        if self.sparse_head:
            hidden = self._hidden_states(input_ids, attention_mask)  # (B, T, H)
            logits = self.head(hidden[predictors])  # (N, V)
        else:  # unknown head (scaling, soft-capping...): the model's own full logits
            logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits[predictors]
        logits = logits.float()  # log-softmax in float32 under bf16 autocast too
        if temperature != 1.0:
            logits = logits / temperature
        if token_masks is not None:
            logits = restrict_logits(logits, token_masks.allowed(wanted, logits.shape[-1]))
        targets = input_ids[wanted]
        logprobs = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
        logprobs = logprobs.masked_scatter(wanted, logprobs_from_logits(logits[None], targets[None])[0])
        entropy = None
        if with_entropy:
            with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                values = entropy_from_logits(logits[None])[0]
                entropy = torch.zeros(input_ids.shape, dtype=values.dtype, device=input_ids.device)
                entropy = entropy.masked_scatter(wanted, values)
        return TokenScores(logprobs=logprobs, entropy=entropy)

    def _hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        batch, length = input_ids.shape
        checkpointed = getattr(self.decoder, "gradient_checkpointing", False) and self.decoder.training
        share = self.share_prefix and batch > 1 and not checkpointed
        prefix = shared_prefix_length(input_ids, attention_mask) if share else 0
        prefix = min(prefix, length - 1)
        if prefix < self.min_shared:
            return self._decoder_fn(input_ids=input_ids, attention_mask=attention_mask,
                                    use_cache=False).last_hidden_state
        head = self.decoder(input_ids=input_ids[:1, :prefix], use_cache=True)
        broadcast = DynamicCache(
            ddp_cache_data=[
                (layer.keys.expand(batch, -1, -1, -1), layer.values.expand(batch, -1, -1, -1))
                for layer in head.past_key_values.layers
            ]
        )
        positions = torch.arange(prefix, length, device=input_ids.device).expand(batch, -1)
        tail = self.decoder(
            input_ids=input_ids[:, prefix:],
            attention_mask=attention_mask,
            position_ids=positions,
            past_key_values=broadcast,
            use_cache=True,
        ).last_hidden_state
        return torch.cat([head.last_hidden_state.expand(batch, -1, -1), tail], dim=1)


def token_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    score_mask: torch.Tensor | None = None,
    **kwargs,
) -> TokenScores:
    """One-off eager ``PolicyForward(model).token_logprobs(...)``."""
    return PolicyForward(model).token_logprobs(input_ids, attention_mask, score_mask, **kwargs)
