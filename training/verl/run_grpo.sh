#!/usr/bin/env bash
# GRPO with VeRL 0.9.x on gym_envfactory environments, on a GPU box (8 GPUs by default; see
# training/verl/config/envfactory_grpo.yaml).  Usage:
#   pip install -e ".[train-verl]" vllm           # VeRL's rollout engine; pick the build for your CUDA
#   bash training/verl/run_grpo.sh HotelBooking TeamCalendar -- trainer.n_gpus_per_node=4 actor_rollout_ref.model.path=/models/Qwen3-1.7B
# Batch sizes follow the number of train rows (gym_envfactory.training.verl.launch: train_batch_size =
# min(64, rows) rounded down to a multiple of ppo_mini_batch_size); it prints the steps VeRL will train and
# stops when that is 0.  Sizes given after `--` are kept.
# Environment: ENVFACTORY_BACKEND=url ENVFACTORY_URL=http://host:8000 and ENVFACTORY_TOKEN_FILE=/path (on every
# node) or ENVFACTORY_TOKEN=... keep sessions on an environment server (`envfactory catalog up`) instead of
# inside VeRL's agent-loop workers; the ENVFACTORY_* variables set here are carried to every Ray worker
# (ray_kwargs.ray_init.runtime_env.env_vars, from a mode-0600 file under $DATA_DIR, not the command line).
set -euo pipefail
envs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#envs[@]} -gt 0 ] || envs=(HotelBooking)
data=${DATA_DIR:-data/envfactory}
mkdir -p "$data"
envfactory export rl "${envs[@]}" --split train --out "$data/train.parquet"
envfactory export rl "${envs[@]}" --split test --out "$data/test.parquet"
config_dir=$(python -c "from gym_envfactory.training.verl import CONFIG_DIR; print(CONFIG_DIR)")
agent_loops=$(python -c "from gym_envfactory.training.verl import AGENT_LOOP_CONFIG; print(AGENT_LOOP_CONFIG)")
launch=$(python -m gym_envfactory.training.verl.launch "$data/train.parquet" "$data/.launch" -- "$@")
mapfile -t extra <<< "$launch"
[ -n "${extra[0]:-}" ] || extra=()
exec python -m verl.trainer.main_ppo \
  --config-path "$config_dir" --config-name envfactory_grpo \
  "${extra[@]}" \
  data.train_files="$data/train.parquet" data.val_files="$data/test.parquet" \
  actor_rollout_ref.rollout.agent.agent_loop_config_path="$agent_loops" \
  "$@"
