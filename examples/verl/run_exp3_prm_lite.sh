#!/usr/bin/env bash
# Exp 3, PRM-Lite: reward = outcome + coef · PRM-Lite process score, Â = A/L (seed: 0.140 pass^1).
# Its numbers: configs/experiment/prm_lite.yaml over configs/grpo.yaml (agentgrpo hosts verl experiment=prm_lite).
source "$(dirname "$0")/common.sh"
run_experiment prm_lite "$@"
