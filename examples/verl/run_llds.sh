#!/usr/bin/env bash
# LLDS: vanilla GRPO + the likelihood-preserving regulariser (λ and gate from the YAML).
# Its numbers: configs/experiment/llds.yaml over configs/grpo.yaml (agentgrpo hosts verl experiment=llds).
source "$(dirname "$0")/common.sh"
run_experiment llds "$@"
