#!/usr/bin/env bash
# LLDS: vanilla GRPO + the likelihood-preserving regulariser, λ = 0.3 (the LLD paper's value for
# Qwen2.5-7B-Instruct), action-level gate. LLDS is 0 while old == current log-probs, so each
# rollout of 4 tasks is split into 2 mini-batches (the paper's setup).
source "$(dirname "$0")/common.sh"
PRM_COEF=0.0
LLDS_COEF=${LLDS_COEF:-0.3}
run_experiment llds \
  algorithm.adv_estimator=agentgrpo_grpo \
  actor_rollout_ref.actor.policy_loss.loss_mode=agentgrpo_llds \
  actor_rollout_ref.actor.ppo_mini_batch_size=2 \
  "$@"
