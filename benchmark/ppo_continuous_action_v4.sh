#!/usr/bin/env bash
# MuJoCo v4, the env versions of CleanRL's published table (docs/cleanrl.md): HalfCheetah-v4, Hopper-v4, Walker2d-v4,
# 1M steps, seeds 1-3, default settings; one report, rebuilt from the committed scalars by the last line alone.
# usage: [OUT=DIR] [CONTINUE=1] [JOBS=1] [SEEDS="1 2 3"] bash benchmark/ppo_continuous_action_v4.sh [flags for every run,
#        after the script's own: they win]   about 1.5 hours on a 2-core AMD EPYC (2026-11-29: 17.3-21.0 minutes a run,
#        the wall times in scalars/, two at a time)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-benchmark/results/ppo_continuous_action_v4}
export RUN_MANY_SESSION="$$ $(date +%s%N)"
bash benchmark/run_many.sh ppo_continuous_action.py "$out" "HalfCheetah-v4 Hopper-v4 Walker2d-v4" "${SEEDS:-1 2 3}" --total-timesteps 1000000 "$@"
python benchmark/report.py "$out/runs" "$out/scalars" --save-scalars --title "MuJoCo v4, 1M steps${*:+; extra flags: $*}" --out "$out/report"
