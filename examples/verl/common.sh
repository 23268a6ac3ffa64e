#!/usr/bin/env bash
# Shared setup of agentgrpo's veRL experiments (sourced by the run_*.sh scripts).
#
# Layout (the seed's): one node, 2 × 80 GB GPUs. GPU 0 trains the policy (Qwen2.5-7B-Instruct:
# FSDP actor + reference + vLLM rollout, colocated); GPU 1 serves the user simulator
# (Qwen2.5-72B-Instruct-AWQ behind vLLM's OpenAI API). Everything below can be overridden
# from the environment, e.g. `POLICY_MODEL=/models/qwen7b USER_BASE_URL=http://h:8001/v1 bash run_exp2_lata.sh`.
# Extra arguments to a run script are Hydra overrides appended to veRL's command line.
#
# The experiment's numbers (estimator, λ, PRM-Lite weight, clip, KL, mini-batches, temperature...)
# are not set here: `agentgrpo hosts verl experiment=NAME $GRPO_OVERRIDES` writes them from
# configs/experiment/NAME.yaml over configs/grpo.yaml, the files the native trainer reads, so
# one name trains one thing on every host. Native overrides go in GRPO_OVERRIDES, e.g.
# `GRPO_OVERRIDES="rollout.temperature=0.7 algo.llds_coef=0.3" bash run_llds.sh`.
#
# Before veRL starts, every launch runs agentgrpo's launch check (python -m
# agentgrpo.integrations.verl.dry_run, same config and overrides): the Hydra config composed,
# the trainer's modules imported, veRL's validate_config, our loss and estimator resolved from
# veRL's registries and the actor/rollout config dataclasses built. It refuses (exit 2, one
# line naming the setting) anything that would replace or silently disable agentgrpo_llds or
# an agentgrpo_* estimator. DRY_RUN=1 stops after it: no Ray, no GPU, nothing trained.
set -euo pipefail

# ---- what to train on -----------------------------------------------------------------
POLICY_MODEL=${POLICY_MODEL:-Qwen/Qwen2.5-7B-Instruct}
DRY_RUN=${DRY_RUN:-}                                 # 1: the launch check only, then stop
# τ-bench's airline data: TAU_BENCH_DIR, else where `agentgrpo env import-tau-bench` writes it
# (data/tau_bench_airline), else ../shared/tau_bench_airline
if [[ -z "${TAU_BENCH_DIR:-}" ]]; then
  for candidate in "$PWD/data/tau_bench_airline" "$PWD/../shared/tau_bench_airline"; do
    if [[ -f "$candidate/users.json" ]]; then TAU_BENCH_DIR=$candidate; break; fi
  done
fi
TAU_BENCH_DIR=${TAU_BENCH_DIR:-$PWD/data/tau_bench_airline}
if [[ -z "${ENV_SOURCE:-}" && -n "$DRY_RUN" && ! -f "$TAU_BENCH_DIR/users.json" && -z "${USER_KIND:-}" ]]; then
  # a dry run checks the launch, not the data: without τ-bench's files it uses generated tasks
  echo "dry run: no τ-bench data at $TAU_BENCH_DIR (write it with: agentgrpo env import-tau-bench" \
       "YOUR_TAU_BENCH_CLONE, or set TAU_BENCH_DIR); checking the launch on generated tasks with the" \
       "scripted user instead (ENV_SOURCE=generated USER_KIND=scripted)" >&2
  ENV_SOURCE=generated USER_KIND=scripted
fi
ENV_SOURCE=${ENV_SOURCE:-tau_bench}                  # tau_bench (the seed's 50 tasks) | generated
# validation tasks (data.val_files, evaluated every trainer.test_freq steps, what the checkpoint
# is chosen by): training families, never trained on. τ-bench has only its 50 tasks, all in the
# seed's 16/24/10 splits, so 4 are held out of uncovered_seen (20 of the 24 are trained on);
# generated tasks draw 8 new ones from the same world. The test split (unseen) is never
# val_files: evaluate it once, after training, with `agentgrpo eval` (docs/scale.md).
if [[ "$ENV_SOURCE" == tau_bench ]]; then VAL_TASKS=${VAL_TASKS:-4}; else VAL_TASKS=${VAL_TASKS:-8}; fi
DATA_DIR=${DATA_DIR:-$PWD/data/verl_airline_${ENV_SOURCE}}
CKPT_DIR=${CKPT_DIR:-$PWD/checkpoints/agentgrpo_airline}
LOG_DIR=${LOG_DIR:-$PWD/logs/verl}

# ---- the user simulator -----------------------------------------------------------------
USER_KIND=${USER_KIND:-llm}                          # llm | scripted (generated tasks only, no GPU 1)
USER_MODEL=${USER_MODEL:-Qwen/Qwen2.5-72B-Instruct-AWQ}
USER_PORT=${USER_PORT:-8001}
USER_BASE_URL=${USER_BASE_URL:-}                     # set to use a server you already run
USER_GPU=${USER_GPU:-1}
POLICY_GPU=${POLICY_GPU:-0}

# ---- the experiment, from the native config ------------------------------------------------
# native overrides (key=value, space-separated) for every run: the policy model's sampling
# temperature, the seed's T = 0.7 for Qwen2.5-7B-Instruct (grpo.yaml's 0.5 is the tiny CPU
# preset's); add e.g. algo.llds_coef=0.3 (the LLD paper's λ for 7B-Instruct) here
GRPO_OVERRIDES=${GRPO_OVERRIDES-rollout.temperature=0.7}
# old log-probs = vLLM's rollout log-probs, no recomputation pass (the seed's memory saver;
# veRL >= 0.7). veRL 0.9's default V1 trainer (trainer.use_v1=true; it imports transfer_queue,
# which agentgrpo[verl] installs) keeps our loss in bypass mode. veRL's legacy trainer (0.7-0.8,
# or trainer.use_v1=false) replaces loss_mode by its own 'bypass_mode' loss there, dropping
# agentgrpo_llds: the launch check refuses that; set BYPASS_MODE=false (empty on veRL < 0.7).
# With LLDS (λ > 0) the default is false: vLLM's log-probs are another numeric path, so
# LLDS would penalise that mismatch and never be 0 on unchanged weights (the check refuses it).
BYPASS_MODE=${BYPASS_MODE-auto}

# Offline HPC clusters: every model must already be in the local HF cache or a path.
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}
export TRANSFORMERS_OFFLINE=${TRANSFORMERS_OFFLINE:-1}

AGENTGRPO_DIR=$(python3 -c "import agentgrpo, pathlib; print(pathlib.Path(agentgrpo.__file__).parent)")
VERL_CONFIGS="$AGENTGRPO_DIR/integrations/verl/configs"
REWARD_FILE="$AGENTGRPO_DIR/integrations/verl/reward.py"
mkdir -p "$LOG_DIR" "$CKPT_DIR"

prepare_data() {
  if [[ -f "$DATA_DIR/train.parquet" && -f "$DATA_DIR/val.parquet" ]]; then return; fi
  local source_args=("source=$ENV_SOURCE" "user.kind=$USER_KIND" "splits.validation=$VAL_TASKS")
  if [[ "$ENV_SOURCE" == tau_bench ]]; then source_args+=("data_dir=$TAU_BENCH_DIR"); fi
  python3 -m agentgrpo verl-prepare --out "$DATA_DIR" "${source_args[@]}"
}

USER_SERVER_PID=""
stop_user_server() {
  if [[ -n "$USER_SERVER_PID" ]]; then kill "$USER_SERVER_PID" 2>/dev/null || true; fi
}

start_user_server() {
  if [[ "$USER_KIND" != llm || -n "$USER_BASE_URL" ]]; then return; fi
  USER_BASE_URL="http://127.0.0.1:${USER_PORT}/v1"
  echo "starting the user simulator ($USER_MODEL) on GPU $USER_GPU, port $USER_PORT"
  CUDA_VISIBLE_DEVICES=$USER_GPU python3 -m vllm.entrypoints.openai.api_server \
    --model "$USER_MODEL" --port "$USER_PORT" --quantization awq --max-model-len 16384 \
    --gpu-memory-utilization 0.92 --served-model-name user-sim > "$LOG_DIR/user_server.log" 2>&1 &
  USER_SERVER_PID=$!
  trap stop_user_server EXIT
  USER_MODEL=user-sim
  for _ in $(seq 1 180); do
    if curl -sf "$USER_BASE_URL/models" > /dev/null; then return; fi
    sleep 5
  done
  echo "the user simulator did not come up; see $LOG_DIR/user_server.log" >&2
  exit 1
}

# run_experiment NAME [hydra overrides...]: NAME is an experiment of configs/experiment/
run_experiment() {
  local name=$1; shift
  prepare_data
  # the experiment's settings: exports the objective whole (AGENTGRPO_OBJECTIVE, one JSON value)
  # and AGENTGRPO_PRM_COEF, sets HOST_BYPASS_MODE (false when LLDS needs recomputed log-probs)
  # and the array HOST_OVERRIDES (refused, one line, when veRL cannot train it)
  local settings
  # shellcheck disable=SC2086  # GRPO_OVERRIDES is a space-separated list of key=value
  settings=$(python3 -m agentgrpo.cli hosts verl "experiment=$name" $GRPO_OVERRIDES)
  eval "$settings"
  export AGENTGRPO_POLICY_MODEL=$POLICY_MODEL
  export AGENTGRPO_USER_KIND=$USER_KIND AGENTGRPO_USER_MODEL=$USER_MODEL
  export AGENTGRPO_USER_BASE_URL=${USER_BASE_URL:-http://127.0.0.1:${USER_PORT}/v1}
  export AGENTGRPO_VERL_CONFIGS=$VERL_CONFIGS AGENTGRPO_REWARD_FILE=$REWARD_FILE AGENTGRPO_DATA_DIR=$DATA_DIR
  export VERL_USE_EXTERNAL_MODULES=agentgrpo.integrations.verl   # veRL 0.6-0.8 (0.9+: entry point)
  # registries and settings are per process: forward them to every Ray worker
  local forward=()
  for var in VERL_USE_EXTERNAL_MODULES AGENTGRPO_OBJECTIVE AGENTGRPO_PRM_COEF \
             AGENTGRPO_USER_KIND AGENTGRPO_USER_MODEL AGENTGRPO_USER_BASE_URL AGENTGRPO_VERL_CONFIGS \
             AGENTGRPO_REWARD_FILE AGENTGRPO_DATA_DIR AGENTGRPO_POLICY_MODEL HF_HUB_OFFLINE \
             TRANSFORMERS_OFFLINE; do
    forward+=("+ray_kwargs.ray_init.runtime_env.env_vars.${var}='${!var}'")
  done
  local bypass=$BYPASS_MODE
  if [[ "$bypass" == auto ]]; then bypass=$HOST_BYPASS_MODE; fi
  if [[ -n "$bypass" ]]; then forward+=("algorithm.rollout_correction.bypass_mode=$bypass"); fi
  # data files, model, agent-loop YAML and reward file come from the AGENTGRPO_* variables
  # that airline_grpo.yaml reads with ${oc.env:...}
  local args=(--config-path="$VERL_CONFIGS" --config-name=airline_grpo
              trainer.experiment_name="$name" trainer.default_local_dir="$CKPT_DIR/$name"
              "${HOST_OVERRIDES[@]}" "${forward[@]}" "$@")
  python3 -m agentgrpo.integrations.verl.dry_run "${args[@]}" | tee "$LOG_DIR/$name.check.log"
  if [[ -n "$DRY_RUN" ]]; then return; fi
  start_user_server
  CUDA_VISIBLE_DEVICES=$POLICY_GPU python3 -m verl.trainer.main_ppo "${args[@]}" 2>&1 | tee "$LOG_DIR/$name.log"
}
