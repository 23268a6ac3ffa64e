#!/usr/bin/env bash
# Exp 2, LATA: Â = A/√L (seed: 0.185 pass^1).
source "$(dirname "$0")/common.sh"
PRM_COEF=0.0
run_experiment lata \
  algorithm.adv_estimator=agentgrpo_lata \
  actor_rollout_ref.actor.policy_loss.loss_mode=agentgrpo_llds \
  "$@"
