#!/usr/bin/env bash
# The GPU machine's jobs (one H100, 16 slow cores). Run from the repo root there, with the wheels of
# `bash benchmark/fetch_gpu_wheels.sh` (plus the test suite's: docs/exactness.md) carried in .whl/.
#   bash benchmark/gpu.sh check            # the CUDA tests, then speed: the GPU issue's one call (CUDA=0: a dry run on the CPU)
#   bash benchmark/gpu.sh speed            # the four scripts, --no-cuda, --cuda and --cuda --cuda-graphs, beside the raw env ($OUT/gpu_speed.md)
#   bash benchmark/gpu.sh atari-speed      # ppo_atari.py (SCRIPT) at the default and throughput settings with FAST, beside the native env
#   bash benchmark/gpu.sh phases           # where an iteration's time goes (benchmark/tools/phases.py), both settings, with and without --sync
#   bash benchmark/gpu.sh start [args]     # the 10M Breakout run in the background (detached), throughput settings
# SCRIPT (default ppo_atari.py) picks the script that atari-speed and phases run, FAST (default --cuda-graphs) the flags they add.
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
SCRIPT=${SCRIPT:-ppo_atari.py}
read -r -a FAST <<<"${FAST---cuda-graphs}"
case "${1:-}" in
speed)
  # every script at its default settings on its default task: the raw env (benchmark/tools/raw_env_sps.py, random actions;
  # ppo_atari.py: ale-py's native vector env), then the script's SPS over a fixed number of steps with --no-cuda, --cuda
  # and --cuda --cuda-graphs, one after the other on this otherwise idle machine; the table in $OUT/gpu_speed.md.
  # CUDA=0: a dry run on the CPU (every mode --no-cuda, two to five iterations) that checks the plumbing, not a measurement
  dry=$([ "${CUDA:-1}" = 0 ] && echo 1 || true)
  device=$([ -n "$dry" ] && echo --no-cuda || echo --cuda)
  table="$OUT/gpu_speed.md"
  rm -f "$OUT/gpu_speed_runs.log"
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
  cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)
  torch_version=$(python3 -c 'import torch; print(torch.__version__)')
  {
    echo "$(date -u '+%F %H:%M UTC'): ${gpu:-no GPU}; $cpu, $(nproc) cores; torch $torch_version; commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)${dry:+; CUDA=0 dry run, not a measurement}"
    echo
    echo "| script | env | steps (CPU / GPU) | raw env steps/s | --no-cuda SPS | --cuda SPS | --cuda --cuda-graphs SPS | best / raw env |"
    echo "|---|---|---|---|---|---|---|---|"
  } >"$table"
  # script, env id, steps on the CPU, steps on the GPU (ppo_atari.py's: the run of the 3,294 SPS figure), steps of a dry
  # run (whole iterations of the default batch), raw env steps; the whole call fits the GPU machine's 15 minutes
  for case in "ppo.py CartPole-v1 25600 25600 2560 20000" "ppo_rnn.py CartPoleNoVel-v1 15360 15360 1536 20000" \
    "ppo_continuous_action.py HalfCheetah-v5 12288 12288 4096 5000" "ppo_atari.py BreakoutNoFrameskip-v4 10240 102400 2048 2000"; do
    read -r script env_id cpu_steps gpu_steps dry_steps raw_steps <<<"$case"
    [ -n "$dry" ] && cpu_steps=$dry_steps gpu_steps=$dry_steps raw_steps=200
    line=$(NATIVE_ONLY=1 python3 benchmark/tools/raw_env_sps.py "$script" "$env_id" "" "$raw_steps" | tail -n 1)
    echo "$line"
    raw=$(grep -oE '[0-9]+ steps/s' <<<"$line" | cut -d' ' -f1)
    row="| $script | $env_id | $cpu_steps / $gpu_steps | $raw"
    best=0
    for mode in no-cuda cuda cuda-graphs; do
      case $mode in no-cuda) flags=(--no-cuda) ;; cuda) flags=("$device") ;; cuda-graphs) flags=("$device" --cuda-graphs) ;; esac
      steps=$([ "$mode" = no-cuda ] && echo "$cpu_steps" || echo "$gpu_steps")
      log="/tmp/gpu_runs/speed_$(basename "$script" .py)_$mode.log"
      mkdir -p "/tmp/gpu_runs/speed_$mode" && (cd "/tmp/gpu_runs/speed_$mode" &&
        python3 "$OLDPWD/$script" --env-id "$env_id" --total-timesteps "$steps" "${flags[@]}") >"$log" 2>&1
      { echo "== $script ${flags[*]}"; cat "$log"; } >>"$OUT/gpu_speed_runs.log"  # few files in $OUT: the device tool's limit
      sps=$(grep -E '^iter ' "$log" | tail -n 1 | sed -E 's/.* SPS ([0-9]+) .*/\1/')
      echo "$script ${flags[*]}: ${sps:-failed} SPS ($(tail -n 1 "$log"))"
      row="$row | ${sps:-failed, $log}"
      [ -n "$sps" ] && [ "$sps" -gt "$best" ] && best=$sps
    done
    echo "$row | $(python3 -c "print(f'{$best / max(${raw:-0}, 1):.2f}')") |" >>"$table"
  done
  cat "$table"
  ;;
check)
  # the GPU issue's one call: the CUDA tests (tests/test_cuda.py, the tests that skip without CUDA), then speed above
  xdist=$(python3 -c 'import xdist' 2>/dev/null && echo "-n ${TEST_WORKERS:-8}" || true)
  # shellcheck disable=SC2086
  timeout "${TEST_TIMEOUT:-300}" python3 -m pytest -p no:cacheprovider -q -rfE $xdist tests/test_cuda.py >"$OUT/cuda_tests.log" 2>&1
  echo "CUDA tests: pytest exit $? (124: stopped after ${TEST_TIMEOUT:-300} s)"
  tail -n 40 "$OUT/cuda_tests.log"
  bash "$0" speed
  ;;
atari-speed)
  # each setting: the raw native env (one AtariVectorEnv of all the envs, one thread per core up to one per env, random
  # actions) and the script's SPS over a whole run, one after the other on this otherwise idle machine
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, os; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'cores', len(os.sched_getaffinity(0)))"
  table="$OUT/speed_$(basename "$SCRIPT" .py).md"
  printf '| setting | envs | raw env steps/s | %s %s SPS | ratio |\n|---|---|---|---|---|\n' "$SCRIPT" "${FAST[*]}" >"$table"
  for setting in default throughput; do
    if [ "$setting" = default ]; then flags=(); envs=8 raw_steps=3000 steps=${STEPS_DEFAULT:-204800}; else flags=("${THROUGHPUT[@]}"); envs=128 raw_steps=600 steps=${STEPS_THROUGHPUT:-491520}; fi
    raw=$(NATIVE_ONLY=1 python3 benchmark/tools/raw_env_sps.py ppo_atari.py BreakoutNoFrameskip-v4 "$envs" "$raw_steps" | tail -n 1)
    echo "$raw"
    raw=$(sed -E 's/.*: ([0-9]+) steps\/s/\1/' <<<"$raw")
    (cd /tmp/gpu_runs && python3 "$OLDPWD/$SCRIPT" --cuda "${FAST[@]}" "${flags[@]}" --total-timesteps "$steps") >"/tmp/gpu_runs/speed_$setting.log" 2>&1
    tail -n 1 "/tmp/gpu_runs/speed_$setting.log"
    sps=$(tail -n 1 "/tmp/gpu_runs/speed_$setting.log" | sed -E 's/.* SPS ([0-9]+) .*/\1/')
    echo "| $setting, $steps steps | $envs | $raw | $sps | $(python3 -c "print(f'{$sps / $raw:.2f}')") |" >>"$table"
  done
  cat "$table"
  ;;
phases)
  # default settings for 30 iterations (30,720 steps), throughput settings for 30 (122,880); tables into $OUT
  name=$(basename "$SCRIPT" .py)
  for sync in "" --sync; do
    python3 benchmark/tools/phases.py $sync --out "$OUT/phases_${name}_default${sync:+_sync}.md" "$SCRIPT" --cuda "${FAST[@]}" --total-timesteps 30720 | tail -n 30
    python3 benchmark/tools/phases.py $sync --out "$OUT/phases_${name}_throughput${sync:+_sync}.md" "$SCRIPT" --cuda "${FAST[@]}" "${THROUGHPUT[@]}" --total-timesteps 122880 | tail -n 30
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
