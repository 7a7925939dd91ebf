#!/usr/bin/env bash
# A script's SPS with default settings next to the raw throughput of the same vector env (random
# actions, same wrappers, same autoreset mode, the script's default number of envs), measured one
# after the other in this run. Run it on an otherwise idle machine.
# usage: bash benchmark/speed.sh [ENV_ID] [SCRIPT] [TOTAL_TIMESTEPS] [RAW_STEPS]
#   bash benchmark/speed.sh                                                   # ppo.py, CartPole-v1, whole default run
#   bash benchmark/speed.sh HalfCheetah-v5 ppo_continuous_action.py 204800 20000
#   bash benchmark/speed.sh BreakoutNoFrameskip-v4 ppo_atari.py 51200 2000
set -euo pipefail
cd "$(dirname "$0")/.."
env_id=${1:-CartPole-v1}
script=${2:-ppo.py}
steps=${3:-}
raw_steps=${4:-50000}
dir=$(mktemp -d)
python benchmark/raw_env_sps.py "$script" "$env_id" "" "$raw_steps" | tee "$dir/raw.txt"
budget=()
if [ -n "$steps" ]; then budget=(--total-timesteps "$steps"); fi
(cd "$dir" && python "$OLDPWD/$script" --env-id "$env_id" --no-cuda "${budget[@]}") >"$dir/train.txt"
train_sps=$(tail -n 1 "$dir/train.txt" | sed -E 's/.* SPS ([0-9]+) .*/\1/')
raw_sps=$(tail -n 1 "$dir/raw.txt" | sed -E 's/.*: ([0-9]+) steps\/s/\1/')
echo "$script $env_id default settings${steps:+, $steps steps}: $train_sps SPS (over the whole run)"
python -c "print(f'ratio to raw (actions drawn in advance): {$train_sps / $raw_sps:.1%}')"
