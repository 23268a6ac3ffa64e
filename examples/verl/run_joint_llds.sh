#!/usr/bin/env bash
# Joint + LLDS: PRM-Lite + LATA + LLDS. Not published anywhere: the combination agentgrpo measures.
# Its numbers: configs/experiment/joint_llds.yaml over configs/grpo.yaml (agentgrpo hosts verl experiment=joint_llds).
source "$(dirname "$0")/common.sh"
run_experiment joint_llds "$@"
