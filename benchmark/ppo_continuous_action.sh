#!/usr/bin/env bash
# MuJoCo, 1M steps, seeds 1-3, default settings; then HalfCheetah-v5 once more with truncation treated
# as termination (the old behaviour, exp name ppo_continuous_action_no_bootstrap; seeds 1-3, or
# NO_BOOTSTRAP_SEEDS="1" for one); one report for all, with P(bootstrap improves on no bootstrap).
# usage: bash benchmark/ppo_continuous_action.sh   (JOBS=1 for one run at a time; about 80 minutes on 2 cores)
#        VARIANT=ent_coef_0.01 (benchmark/variant.sh; TARGET_KL=X for target_kl_X): instead, the three tasks, seeds 1-3,
#        with that setting (--ent-coef 0.01), in results/ppo_continuous_action_ent_coef/, one report with P(it improves
#        on the default)
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmark/variant.sh
out=benchmark/results/ppo_continuous_action
variant=${VARIANT:-${TARGET_KL:+target_kl_$TARGET_KL}}
if [ -n "$variant" ]; then
  variant_flags "$variant"
  exp=ppo_continuous_action_$variant dir=${out}_${variant%_[0-9]*}
  TAG=$variant bash benchmark/run_many.sh ppo_continuous_action.py "$dir" "HalfCheetah-v5 Hopper-v5 Walker2d-v5" "1 2 3" \
    --total-timesteps 1000000 "${flags[@]}" --exp-name "$exp"
  python benchmark/report.py "$dir/runs" "$dir/scalars" "$out/logs" --save-scalars --peaks --title "MuJoCo v5, 1M steps: the default and ${flags[*]}" \
    --compare "$exp" ppo_continuous_action --out "$dir/report"
  exit 0
fi
bash benchmark/run_many.sh ppo_continuous_action.py "$out" "HalfCheetah-v5 Hopper-v5 Walker2d-v5" "1 2 3" --total-timesteps 1000000 --save-model
TAG=no_bootstrap bash benchmark/run_many.sh ppo_continuous_action.py "$out" "HalfCheetah-v5" "${NO_BOOTSTRAP_SEEDS:-1 2 3}" --total-timesteps 1000000 \
  --no-bootstrap-truncation --exp-name ppo_continuous_action_no_bootstrap
python benchmark/report.py "$out/runs" "$out/scalars" --save-scalars --title "MuJoCo v5, 1M steps" --compare ppo_continuous_action ppo_continuous_action_no_bootstrap \
  --out "$out/report"
# the saved final models, evaluated with their frozen statistics next to their training return
for ckpt in "$out"/runs/HalfCheetah-v5__ppo_continuous_action__*/ppo_continuous_action.pt; do
  seed=$(basename "$(dirname "$ckpt")" | awk -F__ '{print $3}')
  train=$(grep "^iter 488/488" "$out/logs/ppo_continuous_action__HalfCheetah-v5__$seed.log" | sed -E 's/.*return (-?[0-9.]+).*/\1/')
  for mode in "" --eval-greedy; do
    echo "seed $seed training (last 100) $train | $(python ppo_continuous_action.py --eval-checkpoint "$ckpt" --eval-episodes 10 --no-cuda $mode | tail -n 1)"
  done
done | tee "$out/eval.txt"
