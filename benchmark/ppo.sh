#!/usr/bin/env bash
# Classic control, 500k steps, seeds 1-3, two runs at a time (one per core); then the report.
# usage: [OUT=DIR] [CONTINUE=1] [JOBS=1] bash benchmark/ppo.sh [ppo.py flags, after the script's own: they win]
#   about 6 minutes on a 2-core AMD EPYC (the runs of 2026-11-24: 1.1-1.4 minutes each, two at a time);
#   a quick try on a fresh clone: OUT=/tmp/ppo bash benchmark/ppo.sh --total-timesteps 20000
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-benchmark/results/ppo}
export RUN_MANY_SESSION="$$ $(date +%s%N)"
bash benchmark/run_many.sh ppo.py "$out" "CartPole-v1 Acrobot-v1 MountainCar-v0" "1 2 3" --total-timesteps 500000 "$@"
python benchmark/report.py "$out/runs" "$out/scalars" --save-scalars --title "ppo.py, classic control, 500k steps${*:+; extra flags: $*}" --out "$out/report"
