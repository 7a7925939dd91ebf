#!/usr/bin/env bash
# A script's SPS next to the raw throughput of the same vector env (random actions, same wrappers,
# same autoreset mode, same number of envs), measured one after the other in this run. Run it on an
# otherwise idle machine. For ppo_atari.py both env paths are measured, raw and in the script: ale-py's
# native vector env (the default) and gymnasium's wrappers (--no-native-envs).
# usage: [CUDA=1] [PATHS="native gym"] [NATIVE_ONLY=1] bash benchmark/speed.sh [ENV_ID] [SCRIPT] [TOTAL_TIMESTEPS] [RAW_STEPS] [script args...]
#   bash benchmark/speed.sh                                                   # ppo.py, CartPole-v1, whole default run
#   bash benchmark/speed.sh HalfCheetah-v5 ppo_continuous_action.py 204800 20000
#   bash benchmark/speed.sh BreakoutNoFrameskip-v4 ppo_atari.py 51200 2000
#   CUDA=1 bash benchmark/speed.sh BreakoutNoFrameskip-v4 ppo_atari.py 1000000 500 --num-envs 128 --num-steps 32 --num-minibatches 16
# The script runs with --no-cuda unless CUDA=1; extra arguments go to the script (a --num-envs there
# sets the raw measurement's number of envs too; NATIVE_ONLY=1 skips the raw SyncVectorEnv).
set -euo pipefail
cd "$(dirname "$0")/.."
env_id=${1:-CartPole-v1}
script=${2:-ppo.py}
steps=${3:-}
raw_steps=${4:-50000}
shift $(($# < 4 ? $# : 4))
extra=("$@")
num_envs=""
for ((i = 0; i < ${#extra[@]}; i++)); do
  if [ "${extra[$i]}" = "--num-envs" ]; then num_envs=${extra[$((i + 1))]}; fi
done
device=--no-cuda
if [ "${CUDA:-0}" = 1 ]; then device=--cuda; fi
dir=$(mktemp -d)
python benchmark/tools/raw_env_sps.py "$script" "$env_id" "$num_envs" "$raw_steps" | tee "$dir/raw.txt"
budget=()
if [ -n "$steps" ]; then budget=(--total-timesteps "$steps"); fi
paths=(default)
if [ "$script" = ppo_atari.py ]; then paths=(${PATHS:-native gym}); fi
for path in "${paths[@]}"; do
  flags=()
  if [ "$path" = gym ]; then flags=(--no-native-envs); fi
  (cd "$dir" && python "$OLDPWD/$script" --env-id "$env_id" "$device" "${budget[@]}" "${extra[@]}" "${flags[@]}") >"$dir/train_$path.txt"
  train_sps=$(tail -n 1 "$dir/train_$path.txt" | sed -E 's/.* SPS ([0-9]+) .*/\1/')
  echo "$script $env_id ${extra[*]:-default settings} ${flags[*]}${steps:+, $steps steps} ($device): $train_sps SPS (over the whole run)"
done
