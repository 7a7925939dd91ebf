#!/usr/bin/env bash
# Classic control, 500k steps, seeds 1-3, two runs at a time (one per core); then the report.
# usage: bash benchmark/ppo.sh   (JOBS=1 for one run at a time; about 15 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
out=benchmark/results/ppo
bash benchmark/run_many.sh ppo.py "$out" "CartPole-v1 Acrobot-v1 MountainCar-v0" "1 2 3" --total-timesteps 500000
python benchmark/report.py "$out/runs" "$out/scalars" --save-scalars --title "ppo.py, classic control, 500k steps" --out "$out/report"
