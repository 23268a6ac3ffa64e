#!/usr/bin/env bash
# Exp 1, Turn-Discount: Â = A/L · w, w ∝ α^(L−1−k), mean 1 (seed: 0.125 pass^1).
# Its numbers: configs/experiment/turn_discount.yaml over configs/grpo.yaml (agentgrpo hosts verl experiment=turn_discount).
source "$(dirname "$0")/common.sh"
run_experiment turn_discount "$@"
