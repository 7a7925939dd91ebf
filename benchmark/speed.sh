#!/usr/bin/env bash
# A script's SPS with default settings next to the raw throughput of the same vector env (random
# actions, same wrappers, same autoreset mode), measured one after the other in this run.
# Run it on an otherwise idle machine. usage: bash benchmark/speed.sh [ENV_ID] [SCRIPT]
set -euo pipefail
cd "$(dirname "$0")/.."
env_id=${1:-CartPole-v1}
script=${2:-ppo.py}
dir=$(mktemp -d)
python benchmark/raw_env_sps.py "$script" "$env_id" | tee "$dir/raw.txt"
(cd "$dir" && python "$OLDPWD/$script" --env-id "$env_id" --no-cuda) >"$dir/train.txt"
train_sps=$(tail -n 1 "$dir/train.txt" | sed -E 's/.* SPS ([0-9]+) .*/\1/')
raw_sps=$(tail -n 1 "$dir/raw.txt" | sed -E 's/.*: ([0-9]+) steps\/s/\1/')
echo "$script $env_id default settings: $train_sps SPS (over the whole run)"
python -c "print(f'ratio to raw (actions drawn in advance): {$train_sps / $raw_sps:.1%}')"
