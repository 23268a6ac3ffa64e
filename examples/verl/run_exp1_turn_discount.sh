#!/usr/bin/env bash
# Exp 1, Turn-Discount: Â = A/L · w, w ∝ 1.05^(L−1−k), mean 1 (seed: 0.125 pass^1).
source "$(dirname "$0")/common.sh"
PRM_COEF=0.0
run_experiment turn_discount \
  algorithm.adv_estimator=agentgrpo_turn_discount \
  algorithm.turn_discount_alpha=1.05 \
  actor_rollout_ref.actor.policy_loss.loss_mode=agentgrpo_llds \
  "$@"
