#!/usr/bin/env bash
# The GPU machine's jobs (one H100, 16 slow cores). Run from the repo root there, with the wheels of
# `bash benchmark/fetch_gpu_wheels.sh` (plus the test suite's: docs/exactness.md) carried in .whl/.
#   bash benchmark/gpu.sh speed            # raw env throughput and ppo_atari.py --cuda SPS, both settings
#   bash benchmark/gpu.sh phases           # where an iteration's time goes (benchmark/phases.py), both settings, with and without --sync
#   bash benchmark/gpu.sh start [args]     # the 10M Breakout run in the background (detached), throughput settings
#   bash benchmark/gpu.sh suite [pytest args]  # the test suite, CUDA section included (log: /tmp/gpu_runs/suite.log)
#   bash benchmark/gpu.sh collect          # the logs and the background run's TensorBoard events into $OUT
# Logs go to $OUT (the device tool brings them back) and to /tmp/gpu_runs (kept while the machine stays warm).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -d .whl ] && [ ! -d /tmp/site ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 WANDB_MODE=offline MPLBACKEND=Agg SDL_VIDEODRIVER=dummy
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT" /tmp/gpu_runs
THROUGHPUT=(--num-envs 128 --num-steps 32 --num-minibatches 16)  # the throughput settings (docs/atari.md)
case "${1:-}" in
speed)
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, os; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'cores', len(os.sched_getaffinity(0)))"
  CUDA=1 bash benchmark/speed.sh BreakoutNoFrameskip-v4 ppo_atari.py 51200 1000
  CUDA=1 PATHS=native NATIVE_ONLY=1 bash benchmark/speed.sh BreakoutNoFrameskip-v4 ppo_atari.py 307200 200 "${THROUGHPUT[@]}"
  ;;
phases)
  # default settings for 51,200 steps, throughput settings for 122,880 (30 iterations each); tables into $OUT
  for sync in "" --sync; do
    python3 benchmark/phases.py $sync --out "$OUT/phases_default${sync:+_sync}.md" ppo_atari.py --cuda --total-timesteps 51200 | tail -n 30
    python3 benchmark/phases.py $sync --out "$OUT/phases_throughput${sync:+_sync}.md" ppo_atari.py --cuda "${THROUGHPUT[@]}" --total-timesteps 122880 | tail -n 30
  done
  ;;
start)
  shift
  (cd /tmp/gpu_runs && setsid nohup python3 "$OLDPWD/ppo_atari.py" --env-id BreakoutNoFrameskip-v4 --cuda --save-model "$@" >/tmp/gpu_runs/train.log 2>&1 &)
  sleep 20 && tail -n 3 /tmp/gpu_runs/train.log
  ;;
suite)
  shift
  python3 -m pytest -p no:cacheprovider "$@" >/tmp/gpu_runs/suite.log 2>&1
  tail -n 60 /tmp/gpu_runs/suite.log
  ;;
collect)
  tail -n 2 /tmp/gpu_runs/train.log
  cp /tmp/gpu_runs/*.log "$OUT/"
  find /tmp/gpu_runs/runs -name 'events.out.tfevents.*' -exec cp {} "$OUT/" \;
  ;;
*)
  sed -n 2,10p "$0"
  exit 1
  ;;
esac
