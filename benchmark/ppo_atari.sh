#!/usr/bin/env bash
# Atari benchmarks for ppo_atari.py (ale-py's native vector env, the default path).
#   [OUT=DIR] [CONTINUE=1] bash benchmark/ppo_atari.sh [flags for every run, after the script's own: they win]
#       GPU machine: Breakout, Pong, BeamRider, 10M steps, seeds 1-3, default settings (8 envs x 128
#       steps), then the same with the throughput settings (128 envs x 32 steps, 16 minibatches;
#       exp name ppo_atari_throughput), one run at a time, with --cuda-graphs. With it, one H100 with 16
#       cores measured 3,294 SPS at the default settings and 8,182 with the throughput settings
#       (gpu.sh atari-speed, 2026-11-24): about 51 and 20 minutes a run (benchmark/README.md, Speed), about
#       11 hours for the 18 runs; not run yet.
#   SHORT=1 [SEEDS="1 2 3"] [OUT=DIR] [CONTINUE=1] bash benchmark/ppo_atari.sh [flags]
#       the CPU check: Breakout, 1M steps, the default settings and the throughput settings side by
#       side (two runs at a time, one per setting, each on one core by taskset, which the native env's
#       threads follow, and OMP_NUM_THREADS=1; the results do not depend on the thread counts), then the report:
#       about 2 hours a seed on a 2-core AMD EPYC (2026-11-23/24: 112-132 minutes a run, each log's steps over its SPS).
# On the GPU machine, which runs one command for 10 minutes at most, benchmark/gpu.sh starts one run
# detached and collects its log; `--save-model` then `--resume` continues a run in a later session
# (native envs: new games, same agent, optimizer, counters and RNGs).
set -euo pipefail
cd "$(dirname "$0")/.."
throughput=(--num-envs 128 --num-steps 32 --num-minibatches 16 --exp-name ppo_atari_throughput)
export RUN_MANY_SESSION="$$ $(date +%s%N)"
if [ "${SHORT:-0}" = 1 ]; then
  out=${OUT:-benchmark/results/ppo_atari_1m_native}
  export OMP_NUM_THREADS=1
  JOBS=1 taskset -c 0 bash benchmark/run_many.sh ppo_atari.py "$out" "BreakoutNoFrameskip-v4" "${SEEDS:-1}" \
    --total-timesteps 1000000 "$@" &
  default_run=$!
  JOBS=1 TAG=throughput taskset -c 1 bash benchmark/run_many.sh ppo_atari.py "$out" "BreakoutNoFrameskip-v4" "${SEEDS:-1}" \
    --total-timesteps 1000000 "${throughput[@]}" "$@" &
  throughput_run=$!
  wait "$default_run"  # either one's error (such as an earlier benchmark's runs in $out/runs) stops the script
  wait "$throughput_run"
  python benchmark/report.py "$out/runs" "$out/scalars" --save-scalars --title "Breakout, 1M steps, CPU${*:+; extra flags: $*}" --out "$out/report" \
    --at 100000,300000,500000,800000,999424
else
  out=${OUT:-benchmark/results/ppo_atari}
  games="BreakoutNoFrameskip-v4 PongNoFrameskip-v4 BeamRiderNoFrameskip-v4"
  JOBS=1 bash benchmark/run_many.sh ppo_atari.py "$out" "$games" "1 2 3" --cuda --cuda-graphs --save-model "$@"
  JOBS=1 TAG=throughput bash benchmark/run_many.sh ppo_atari.py "$out" "$games" "1 2 3" --cuda --cuda-graphs --save-model "${throughput[@]}" "$@"
  python benchmark/report.py "$out/runs" "$out/scalars" --save-scalars --title "Atari, 10M steps${*:+; extra flags: $*}" --out "$out/report"
fi
