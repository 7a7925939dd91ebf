#!/usr/bin/env bash
# Shared by the benchmark scripts: run SCRIPT over ENVS x SEEDS, JOBS at a time, logs under OUT.
# CLUSTER=slurm SWEEP_ARGS="--partition p --time 120": the same runs through benchmark/sweep.py (Slurm, submitit).
# usage: [TAG=name] [CONTINUE=1] run_many.sh SCRIPT OUT "ENV1 ENV2" "1 2 3" [extra args for the script...]
#   TAG goes into the log names; SCRIPT is a path from the repository root, or an absolute one.
# A fresh benchmark by default: every run runs. It stops at once if OUT/runs holds run directories (an earlier
# benchmark's, which the report would mix in), and removes OUT/scalars, an earlier benchmark's (git keeps them).
# CONTINUE=1 completes an interrupted benchmark instead: a run whose log has its last iteration is skipped, and runs/
# and scalars/ stay. A benchmark script that calls run_many.sh several times on one OUT exports RUN_MANY_SESSION (an
# id of its own invocation), so that the calls after the first belong to the same fresh benchmark.
set -euo pipefail
script=$1 out=$2 envs=$3 seeds=$4
shift 4
root="$(cd "$(dirname "$0")/.." && pwd)"
jobs=${JOBS:-2}
session=${RUN_MANY_SESSION:-}
if [ -z "${CONTINUE:-}" ] && { [ -z "$session" ] || [ "$(cat "$out/runs/.session" 2>/dev/null)" != "$session" ]; }; then
  if [ -n "$(find "$out/runs" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | head -n 1)" ]; then
    echo "error: $out/runs holds an earlier benchmark's runs, which the report would mix in: CONTINUE=1 to complete that benchmark, or move $out/runs away" >&2
    exit 1
  fi
  if [ -d "$out/scalars" ]; then
    rm -rf "$out/scalars"
    echo "removed $out/scalars, an earlier benchmark's (git keeps them): the report holds only this benchmark's runs"
  fi
  mkdir -p "$out/runs"
  if [ -n "$session" ]; then echo "$session" >"$out/runs/.session"; fi
fi
if [ -n "${CLUSTER:-}" ]; then
  # the same runs as submitit jobs (benchmark/sweep.py): CLUSTER=slurm or local; Slurm's options in SWEEP_ARGS.
  # Without CONTINUE each run starts anew (--fresh); with it, the sweep resumes unfinished runs and finished ones stop.
  flags=()
  if [ -z "${CONTINUE:-}" ]; then flags+=(--fresh); fi
  if [ -n "${TAG:-}" ]; then flags+=(--tag "$TAG"); fi
  # shellcheck disable=SC2086
  exec python "$root/benchmark/sweep.py" "$script" --env-ids $envs --seeds $seeds --out "$out" --cluster "$CLUSTER" \
    ${JOBS:+--jobs $JOBS} "${flags[@]}" --wait ${SWEEP_ARGS:-} -- "$@"
fi
path=$script
if [[ $script != /* ]]; then path=$root/$script; fi
mkdir -p "$out/logs"
cd "$out"
for env in $envs; do
  for seed in $seeds; do
    log="logs/$(basename "$script" .py)${TAG:+__$TAG}__${env//\//_}__$seed.log"
    if [ -n "${CONTINUE:-}" ] && grep -qE '^iter ([0-9]+)/\1 ' "$log" 2>/dev/null; then
      echo "skip $script $env seed $seed: its log has its last iteration (CONTINUE=1)"
      continue
    fi
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 1; done
    echo "start $script $env seed $seed"
    python "$path" --env-id "$env" --seed "$seed" --no-cuda "$@" >"$log" 2>&1 &
  done
done
wait
