#!/usr/bin/env bash
# Partially observable classic control (velocities masked), 500k steps, seeds 1-3: ppo_rnn.py and,
# on the same tasks, the memoryless ppo.py (its default settings); then one report for both.
# usage: bash benchmark/ppo_rnn.sh   (JOBS=1 for one run at a time)
set -euo pipefail
cd "$(dirname "$0")/.."
out=benchmark/results/ppo_rnn
bash benchmark/run_many.sh ppo_rnn.py "$out" "CartPoleNoVel-v1 AcrobotNoVel-v1" "1 2 3" --total-timesteps 500000
bash benchmark/run_many.sh ppo.py "$out" "ppo_rnn:CartPoleNoVel-v1 ppo_rnn:AcrobotNoVel-v1" "1 2 3" --total-timesteps 500000
python benchmark/report.py "$out/runs" --title "velocity-masked classic control, 500k steps" --threshold 475 --out "$out/report"
