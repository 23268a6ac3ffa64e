#!/usr/bin/env bash
# Joint + LLDS: outcome + 0.3 · PRM-Lite, Â = A/√L, plus LLDS (λ = 0.3, 2 mini-batches per
# rollout). Not published anywhere: this is the combination agentgrpo measures.
source "$(dirname "$0")/common.sh"
PRM_COEF=0.3
LLDS_COEF=${LLDS_COEF:-0.3}
run_experiment joint_llds \
  algorithm.adv_estimator=agentgrpo_lata \
  actor_rollout_ref.actor.policy_loss.loss_mode=agentgrpo_llds \
  actor_rollout_ref.actor.ppo_mini_batch_size=2 \
  "$@"
