#!/usr/bin/env bash
# Exp 4, Joint = PRM-Lite + LATA: outcome + 0.3 · PRM-Lite, Â = A/√L (seed's best: 0.240 pass^1).
source "$(dirname "$0")/common.sh"
PRM_COEF=0.3
run_experiment joint \
  algorithm.adv_estimator=agentgrpo_lata \
  actor_rollout_ref.actor.policy_loss.loss_mode=agentgrpo_llds \
  "$@"
