#!/usr/bin/env bash
# MuJoCo, 1M steps, seeds 1-3, default settings; then HalfCheetah-v5 once more with truncation treated
# as termination (the old behaviour, exp name ppo_continuous_action_no_bootstrap; seeds 1-3, or
# NO_BOOTSTRAP_SEEDS="1" for one); one report for all, with P(bootstrap improves on no bootstrap).
# usage: [OUT=DIR] [CONTINUE=1] [JOBS=1] bash benchmark/ppo_continuous_action.sh [flags for every run, after the
#        script's own: they win]   about 75 minutes on a 2-core AMD EPYC (the 12 runs of 2026-11-25, two at a time:
#        11.4-12.6 minutes a run, report.md's row means), and a minute or two for the evaluations
#        VARIANT=ent_coef_0.01 (benchmark/variant.sh; TARGET_KL=X for target_kl_X): instead, the three tasks, seeds 1-3,
#        with that setting (--ent-coef 0.01), in results/ppo_continuous_action_ent_coef/ (OUT's folder + _ent_coef), one
#        report with P(it improves on the default) against the default's logs in OUT/logs; about 70 minutes on a 2-core
#        Intel Xeon (2026-11-26: 14.4-15.5 minutes a run, two at a time)
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmark/variant.sh
out=${OUT:-benchmark/results/ppo_continuous_action}
export RUN_MANY_SESSION="$$ $(date +%s%N)"
variant=${VARIANT:-${TARGET_KL:+target_kl_$TARGET_KL}}
if [ -n "$variant" ]; then
  variant_flags "$variant"
  exp=ppo_continuous_action_$variant dir=${out}_${variant%_[0-9]*}
  TAG=$variant bash benchmark/run_many.sh ppo_continuous_action.py "$dir" "HalfCheetah-v5 Hopper-v5 Walker2d-v5" "1 2 3" \
    --total-timesteps 1000000 "${flags[@]}" --exp-name "$exp" "$@"
  python benchmark/report.py "$dir/runs" "$dir/scalars" "$out/logs" --save-scalars --peaks --title "MuJoCo v5, 1M steps: the default and ${flags[*]}${*:+; extra flags: $*}" \
    --compare "$exp" ppo_continuous_action --out "$dir/report"
  exit 0
fi
bash benchmark/run_many.sh ppo_continuous_action.py "$out" "HalfCheetah-v5 Hopper-v5 Walker2d-v5" "1 2 3" --total-timesteps 1000000 --save-model "$@"
TAG=no_bootstrap bash benchmark/run_many.sh ppo_continuous_action.py "$out" "HalfCheetah-v5" "${NO_BOOTSTRAP_SEEDS:-1 2 3}" --total-timesteps 1000000 \
  --no-bootstrap-truncation --exp-name ppo_continuous_action_no_bootstrap "$@"
python benchmark/report.py "$out/runs" "$out/scalars" --save-scalars --title "MuJoCo v5, 1M steps${*:+; extra flags: $*}" --compare ppo_continuous_action ppo_continuous_action_no_bootstrap \
  --out "$out/report"
# the saved final models, evaluated with their frozen statistics next to their training return
for ckpt in "$out"/runs/HalfCheetah-v5__ppo_continuous_action__*/ppo_continuous_action.pt; do
  seed=$(basename "$(dirname "$ckpt")" | awk -F__ '{print $3}')
  train=$(grep -E '^iter ([0-9]+)/\1 ' "$out/logs/ppo_continuous_action__HalfCheetah-v5__$seed.log" | sed -E 's/.*return (-?[0-9.]+).*/\1/' || true)
  for mode in "" --eval-greedy; do
    echo "seed $seed training (last 100) $train | $(python ppo_continuous_action.py --eval-checkpoint "$ckpt" --eval-episodes 10 --no-cuda $mode | tail -n 1)"
  done
done | tee "$out/eval.txt"
