#!/usr/bin/env bash
# MuJoCo v4, the env versions of CleanRL's published table (docs/cleanrl.md): HalfCheetah-v4, Hopper-v4, Walker2d-v4,
# 1M steps, seeds 1-3, default settings; one report, rebuilt from the committed scalars by the last line alone.
# usage: bash benchmark/ppo_continuous_action_v4.sh   (JOBS=1 for one run at a time)
set -euo pipefail
cd "$(dirname "$0")/.."
out=benchmark/results/ppo_continuous_action_v4
bash benchmark/run_many.sh ppo_continuous_action.py "$out" "HalfCheetah-v4 Hopper-v4 Walker2d-v4" "${SEEDS:-1 2 3}" --total-timesteps 1000000
python benchmark/report.py "$out/runs" "$out/scalars" --save-scalars --title "MuJoCo v4, 1M steps" --out "$out/report"
