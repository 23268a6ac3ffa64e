#!/usr/bin/env bash
# Exp 4, Joint = PRM-Lite + LATA: Â = A/√L on outcome + coef · PRM-Lite (seed's best: 0.240 pass^1).
# Its numbers: configs/experiment/joint.yaml over configs/grpo.yaml (agentgrpo hosts verl experiment=joint).
source "$(dirname "$0")/common.sh"
run_experiment joint "$@"
