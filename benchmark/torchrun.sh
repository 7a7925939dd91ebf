#!/usr/bin/env bash
# Data parallelism on this machine: SPS with 1 and 2 processes side by side (`python` against
# `torchrun --standalone --nproc-per-node 2`, one after the other, same command line), then the
# learning checks under 2 processes. Logs and reports in benchmark/results/torchrun/ (or OUT=DIR).
#   bash benchmark/torchrun.sh speed       # ppo.py (CartPole-v1, 200k steps) and ppo_atari.py (Breakout, 51,200 steps), 1 and 2 processes
#                                         (about 7 minutes on a 2-core AMD EPYC: the wall times in speed.txt, 427 s)
#   bash benchmark/torchrun.sh cartpole [flags]   # ppo.py on CartPole-v1, 2 processes, 500k steps, seeds 1-3 (one run at a
#                                         time; 6.8 minutes a run on the same machine with a 1M Atari run sharing it,
#                                         report.md, 2026-11-23)
#   [SEEDS="1 2 3"] bash benchmark/torchrun.sh atari [flags]   # ppo_atari.py on Breakout, 2 processes, 1M steps, default
#                                         settings, seed 1 (or SEEDS, one at a time; about 50 minutes a seed on the same
#                                         machine, report.md's 48.1, 2026-11-24)
# flags: given to every run, after the script's own (they win).
# Each launcher with its defaults, as a user runs it: `python` leaves torch its thread count (ppo.py
# sets one itself; ppo_atari.py uses torch's default, 2 here), torchrun gives each process
# OMP_NUM_THREADS=1. ppo_atari.py's native env threads are shared out among the local processes.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=$(realpath -m "${OUT:-benchmark/results/torchrun}")
extra="${*:2}"  # the flags after the subcommand, for the report's title
mkdir -p "$out/logs" "$out/speed"
sps() { tail -n 1 "$1" | sed -E 's/.* SPS ([0-9]+) .*/\1/'; }
# run a command; print how many cores it kept busy: (user + sys CPU time of it and its children) / wall time
busy() {
  local TIMEFORMAT="%R %U %S" t
  t=$({ time "$@" >/dev/null 2>&1; } 2>&1)
  awk '{ printf "%.2f cores busy (%.0f s wall, %.0f s user, %.0f s sys)", ($2 + $3) / $1, $1, $2, $3 }' <<<"$t"
}
case "${1:-}" in
speed)
  for spec in "ppo.py CartPole-v1 200000" "ppo_atari.py BreakoutNoFrameskip-v4 51200"; do
    read -r script env_id steps <<<"$spec"
    log="$out/logs/speed_${script%.py}"
    # speed runs log under speed/runs, apart from the learning runs the report reads, one name per launcher
    one=$(busy bash -c "cd $out/speed && python $root/$script --env-id $env_id --total-timesteps $steps --no-cuda \
      --exp-name speed_${script%.py}_1proc >${log}_1proc.log 2>&1")
    two=$(busy bash -c "cd $out/speed && python -m torch.distributed.run --standalone --nproc-per-node 2 $root/$script --env-id $env_id \
      --total-timesteps $steps --no-cuda --exp-name speed_${script%.py}_2proc >${log}_2proc.log 2>&1")
    echo "$script $env_id default settings, $steps steps: 1 process $(sps "${log}_1proc.log") SPS, 2 processes $(sps "${log}_2proc.log") SPS"
    echo "  1 process: $one; 2 processes: $two"
  done | tee "$out/speed.txt"
  # what the collectives cost here (each minibatch step makes one of the gradient's size and four small ones)
  python -m torch.distributed.run --standalone --nproc-per-node 2 benchmark/tools/allreduce.py 2>/dev/null | tee -a "$out/speed.txt"
  ;;
cartpole)
  for seed in 1 2 3; do
    (cd "$out" && python -m torch.distributed.run --standalone --nproc-per-node 2 "$root/ppo.py" --seed "$seed" --no-cuda \
      --exp-name ppo_torchrun2 "${@:2}" >"$out/logs/ppo_torchrun2__CartPole-v1__$seed.log" 2>&1)
  done
  python benchmark/report.py "$out/runs" "$out/scalars" --save-scalars --title "torchrun, 2 processes${extra:+; extra flags: $extra}" --out "$out/report"
  ;;
atari)
  for seed in ${SEEDS:-1}; do
    (cd "$out" && python -m torch.distributed.run --standalone --nproc-per-node 2 "$root/ppo_atari.py" --seed "$seed" --no-cuda \
      --total-timesteps 1000000 --exp-name ppo_atari_torchrun2 "${@:2}" >"$out/logs/ppo_atari_torchrun2__BreakoutNoFrameskip-v4__$seed.log" 2>&1)
  done
  python benchmark/report.py "$out/runs" "$out/scalars" --save-scalars --title "torchrun, 2 processes${extra:+; extra flags: $extra}" --out "$out/report" --at 100000,300000,500000,800000,999424
  ;;
*)
  sed -n 2,16p "$0"
  exit 1
  ;;
esac
