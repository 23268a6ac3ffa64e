#!/usr/bin/env bash
# Exp 2, LATA: Â = A/√L (seed: 0.185 pass^1).
# Its numbers: configs/experiment/lata.yaml over configs/grpo.yaml (agentgrpo hosts verl experiment=lata).
source "$(dirname "$0")/common.sh"
run_experiment lata "$@"
