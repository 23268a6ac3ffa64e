#!/usr/bin/env bash
# Exp 3, PRM-Lite: reward = outcome + 0.3 · PRM-Lite process score, Â = A/L (seed: 0.140 pass^1).
source "$(dirname "$0")/common.sh"
PRM_COEF=0.3
run_experiment prm_lite \
  algorithm.adv_estimator=agentgrpo_grpo \
  actor_rollout_ref.actor.policy_loss.loss_mode=agentgrpo_llds \
  "$@"
