#!/usr/bin/env bash
# The veRL GPU check (docs/results/gpu.md): a few timed veRL GRPO steps of agentgrpo_lata + LLDS
# (run_joint_llds.sh: configs/experiment/joint_llds.yaml, A/√L, λ = 0.2, 2 updates per rollout,
# outcome + 0.3·PRM-Lite) on generated airline tasks with the scripted user, on one GPU.
# Writes $OUT/gpu_check.json (steps/s, per-step seconds, loss/llds) and the logs.
#
#   OUT=runs/gpu_check STEPS=4 bash examples/verl/gpu_check.sh [extra Hydra overrides]
#
# Needs on the machine: agentgrpo[verl] (veRL 0.9.x, transferqueue) and veRL's GPU stack: a CUDA
# build of torch, vLLM (the rollout engine) and flash-attn. It checks them first and exits 3
# naming what is missing, so a machine with a GPU and torch but without veRL, Ray or vLLM stops
# in seconds with the list instead of deep inside veRL's start-up.
#
# The model: POLICY_MODEL=<a local HF directory>, else agentgrpo's largest built preset (PRESET,
# default `small`: Llama-shaped, random init, the domain tokenizer, built here in seconds), so the
# check needs no model hub: a pretrained checkpoint must already be on the machine's disk.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$PWD/gpu_check}
STEPS=${STEPS:-4}
PRESET=${PRESET:-small}
mkdir -p "$OUT"

python3 - <<'EOF' || exit 3
import importlib.util, sys
missing = [m for m in ("torch", "verl", "ray", "vllm", "flash_attn", "transfer_queue", "agentgrpo")
           if importlib.util.find_spec(m) is None]
if not missing:
    import torch
    if not torch.cuda.is_available():
        missing.append("a CUDA device (torch.cuda.is_available() is False)")
if missing:
    print("gpu_check needs: " + ", ".join(missing), file=sys.stderr)
    sys.exit(1)
EOF

if [[ -z "${POLICY_MODEL:-}" ]]; then
  POLICY_MODEL="$OUT/policy_$PRESET"
  if [[ ! -f "$POLICY_MODEL/agentgrpo.json" ]]; then
    python3 - "$PRESET" "$POLICY_MODEL" <<'EOF'
import sys
from agentgrpo.envs.config import EnvConfig
from agentgrpo.envs.registry import build_env
from agentgrpo.policy.hf import build_policy
from agentgrpo.policy.tokenizer import domain_corpus
preset, out = sys.argv[1:]
build_policy(preset, domain_corpus(build_env(EnvConfig()).domain), out, seed=0, agent_config={"prompt_style": "full"})
EOF
  fi
fi

export POLICY_MODEL ENV_SOURCE=generated USER_KIND=scripted POLICY_GPU=${POLICY_GPU:-0}
export DATA_DIR="$OUT/data" CKPT_DIR="$OUT/checkpoints" LOG_DIR="$OUT"
start=$(date +%s)
# one GPU, no user-simulator GPU (scripted user); no offload (an H200 holds a small model many
# times over); no validation or checkpoint inside the timed steps
bash "$HERE/run_joint_llds.sh" \
  trainer.total_training_steps="$STEPS" trainer.test_freq=-1 trainer.val_before_train=false \
  trainer.save_freq=-1 'trainer.logger=[console]' data.max_response_length=4096 \
  actor_rollout_ref.actor.fsdp_config.param_offload=false \
  actor_rollout_ref.actor.fsdp_config.optimizer_offload=false \
  actor_rollout_ref.ref.fsdp_config.param_offload=false \
  actor_rollout_ref.rollout.gpu_memory_utilization=0.4 \
  "$@"
wall=$(( $(date +%s) - start ))

python3 - "$OUT/joint_llds.log" "$OUT/gpu_check.json" "$POLICY_MODEL" "$STEPS" "$wall" <<'EOF'
import json, re, sys
log, out, model, steps, wall = sys.argv[1:]
text = open(log, errors="replace").read()
number = r"(-?[0-9.]+(?:[eE][-+]?[0-9]+)?)"
step_s = [float(x) for x in re.findall(r"timing_s/step:" + number, text)]
llds = [float(x) for x in re.findall(r"loss/llds:" + number, text)]
timed = step_s[1:] or step_s  # the first step includes vLLM's and the kernels' warm-up
result = {
    "model": model, "steps_asked": int(steps), "steps_logged": len(step_s), "wall_s": int(wall),
    "step_seconds": step_s, "steps_per_s_after_first": (len(timed) / sum(timed)) if timed else None,
    "loss_llds": llds,
}
json.dump(result, open(out, "w"), indent=2)
print(json.dumps(result, indent=2))
EOF
