#!/usr/bin/env bash
# Atari, default settings (10M steps), seeds 1-3: Breakout, Pong, BeamRider. 10M steps take about
# 12 hours per run on a 2-core CPU: run it on a GPU machine. `SHORT=1` runs the CPU check instead:
# Breakout, 1M steps, seed 1 (compare with CleanRL's 21.04 at 1M on this machine class); SEEDS="2 3"
# adds seeds to the same report, JOBS at a time. The committed 1M results ran with OMP_NUM_THREADS=1
# (each shared the CPU with another run).
# usage: bash benchmark/ppo_atari.sh   or   SHORT=1 [SEEDS="1 2 3"] [JOBS=2] bash benchmark/ppo_atari.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${SHORT:-0}" = 1 ]; then
  out=benchmark/results/ppo_atari_1m
  JOBS=${JOBS:-1} bash benchmark/run_many.sh ppo_atari.py "$out" "BreakoutNoFrameskip-v4" "${SEEDS:-1}" --total-timesteps 1000000 --save-model
  python benchmark/report.py "$out/runs" --title "Breakout, 1M steps, CPU" --out "$out/report"
else
  out=benchmark/results/ppo_atari
  JOBS=${JOBS:-1} bash benchmark/run_many.sh ppo_atari.py "$out" "BreakoutNoFrameskip-v4 PongNoFrameskip-v4 BeamRiderNoFrameskip-v4" "1 2 3" --cuda
  python benchmark/report.py "$out/runs" --title "Atari, 10M steps" --out "$out/report"
fi
