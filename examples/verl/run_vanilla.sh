#!/usr/bin/env bash
# Vanilla GRPO, the collapse baseline: binary outcome reward, Â = A/L (seed: 0.175 pass^1).
# Its numbers: configs/experiment/vanilla.yaml over configs/grpo.yaml (agentgrpo hosts verl experiment=vanilla).
source "$(dirname "$0")/common.sh"
run_experiment vanilla "$@"
