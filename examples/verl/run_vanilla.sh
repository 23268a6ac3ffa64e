#!/usr/bin/env bash
# Vanilla GRPO, the collapse baseline: binary outcome reward, Â = A/L (seed: 0.175 pass^1).
source "$(dirname "$0")/common.sh"
PRM_COEF=0.0
run_experiment vanilla \
  algorithm.adv_estimator=agentgrpo_grpo \
  actor_rollout_ref.actor.policy_loss.loss_mode=agentgrpo_llds \
  "$@"
