#!/usr/bin/env bash
# Shared by the benchmark scripts: run SCRIPT over ENVS x SEEDS, JOBS at a time, logs under OUT.
# CLUSTER=slurm SWEEP_ARGS="--partition p --time 120": the same runs through benchmark/sweep.py (Slurm, submitit).
# usage: [TAG=name] run_many.sh SCRIPT OUT "ENV1 ENV2" "1 2 3" [extra args for the script...]  (TAG goes into the log names)
# A run whose log already has its last iteration is not run again (FORCE=1 runs every one): a benchmark can be
# completed over several sittings.
set -euo pipefail
script=$1 out=$2 envs=$3 seeds=$4
shift 4
root="$(cd "$(dirname "$0")/.." && pwd)"
jobs=${JOBS:-2}
if [ -n "${CLUSTER:-}" ]; then
  # the same runs as submitit jobs (benchmark/sweep.py): CLUSTER=slurm or local; Slurm's options in SWEEP_ARGS
  # shellcheck disable=SC2086
  exec python "$root/benchmark/sweep.py" "$script" --env-ids $envs --seeds $seeds --out "$out" --cluster "$CLUSTER" \
    ${JOBS:+--jobs $JOBS} --wait ${SWEEP_ARGS:-} -- "$@"
fi
mkdir -p "$out/logs"
cd "$out"
for env in $envs; do
  for seed in $seeds; do
    log="logs/${script%.py}${TAG:+__$TAG}__${env//\//_}__$seed.log"
    if [ -z "${FORCE:-}" ] && grep -qE '^iter ([0-9]+)/\1 ' "$log" 2>/dev/null; then
      echo "done $script $env seed $seed: its log has its last iteration (FORCE=1 runs it again)"
      continue
    fi
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 1; done
    echo "start $script $env seed $seed"
    python "$root/$script" --env-id "$env" --seed "$seed" --no-cuda "$@" >"$log" 2>&1 &
  done
done
wait
